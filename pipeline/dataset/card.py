"""The dataset card (README.md): a YAML header that `datasets.load_dataset(dir)` and the Hub read,
and a body that says what the data is and how it was made."""

from __future__ import annotations

from typing import Any

from jinja2 import Environment

from pipeline.teach.labels.cost import ERPV_SECONDS_PER_CALL

# The papers whose methods the labels serve (seeds of the project's design).
CITATIONS = """@article{erpv,
  title = {ERPv: Enhancing Visual Reinforcement Learning with Partially Reliable Knowledge from VLMs},
  note = {under double-blind review}
}
@article{semore,
  title = {Semore: VLM-guided Enhanced Semantic Motion Representations for Visual Reinforcement
           Learning}
}
@article{chen_macro_semantics,
  title = {Macro Semantics, Micro Kinematics: Bridging VLMs and Dense Control in Embodied RL},
  author = {Chen, Zekai}
}"""

# The Hub's size categories (number of rows).
_SIZES = [(1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")]


def size_category(rows: int) -> str:
    return next((name for limit, name in _SIZES if rows < limit), "n>1M")


def card_header(info: dict[str, Any], features: Any) -> str:
    """The card's YAML header, built by huggingface_hub's DatasetCardData (what `hf upload` and
    the Hub read; `datasets.load_dataset(dir)` reads `configs` and `dataset_info` from it):
    license, task and size categories, pretty name, the parquet files as the `train` split, and
    the features of the parquet files (datasets' own YAML form of `Features`)."""
    from huggingface_hub import DatasetCardData

    data = DatasetCardData(
        license="mit",
        pretty_name=f"{info['env_id']} rollouts with cached VLM-teacher labels",
        task_categories=["reinforcement-learning"],
        size_categories=[size_category(info["counts"]["samples"])],
        tags=["vlm-labels", "offline-rl", info["env_id"]],
        configs=[
            {
                "config_name": "default",
                "data_files": [{"split": "train", "path": "data/train-*.parquet"}],
            }
        ],
        dataset_info={
            # datasets' serialiser of Features, the one its push_to_hub writes cards with. No
            # `splits`: datasets wants each split's Arrow size (num_bytes) there, which only its
            # own writer knows, and warns at every load of a card without it; the split sizes
            # are in meta/info.json.
            "features": features._to_yaml_list(),
        },
    )
    return f"---\n{data.to_yaml()}\n---\n"


_CARD = """# {{ info.env_id }}: rollouts with cached VLM-teacher labels

Made by the vlmrl-pipeline (`dvc repro`): rollouts collected in `{{ info.env_id }}`, every k-th frame
labelled by a teacher, object phrases turned into masks. Dataset format version {{ info.format_version }}.
{% if scripted %}
**The labels come from the scripted teacher, a stand-in for a VLM** (deterministic reference scripts
with injected failures). They say nothing about any real model.
{% endif %}
## Contents

| | |
|---|---|
| samples (one per step, plus each episode's final observation) | {{ c.samples }} |
| episodes / steps | {{ c.episodes }} / {{ c.steps }} |
| teacher answers (queried frames x tasks) | {{ c.labelled_answers }} |
| frames with masks | {{ c.frames_with_masks }} |
| frame size | {{ info.observation.pixels | join(" x ") }} |
| action space | {{ info.action_space.type }}{% if info.action_choices %} ({{ info.action_choices | join(", ") }}){% else %} ({{ info.action_names | join(", ") }}){% endif %} |
| behaviour | {{ info.collect.behaviour }} (seed {{ info.collect.seed }}) |
| teacher{% if info.teacher_ids | length > 1 %}s{% endif %} | {% for t in info.teacher_ids %}`{{ t }}` {% endfor %} |
| mask back end | {% for m in info.mask_backend_ids %}`{{ m }}` {% endfor %} |

{% if info.cost %}## What the labels cost

A build without the label cache asks the teacher {{ info.cost.teacher_calls }} prompts (a frame asked one
question twice is answered once): {% for task, n in info.cost.teacher_calls_by_task.items() %}{{ task }} {{ n }}{{ ", " if not loop.last else "" }}{% endfor %}.
At ERPv table 14's {{ erpv_seconds }} s per Qwen2-VL-7B call that is {{ "%.0f" | format(info.cost.seconds_at_erpv_rate) }} s of VLM time. The seconds
and tokens measured where the dataset was built are that project's `costs/label/{{ info.env_id }}.json`
(`dvc metrics show costs/label`): they depend on the machine and the server, so the dataset does not hold them.

{% endif %}## Parse status of the teacher's answers

| task | {% for s in statuses %}{{ s }} | {% endfor %}
|---|{% for s in statuses %}---|{% endfor %}
{% for task, counts in info.parse_status.items() %}| {{ task }} | {% for s in statuses %}{{ counts.get(s, 0) }} | {% endfor %}
{% endfor %}
Rows whose status is not `ok` or `regex_fallback` carry no label value: use them as unlabelled.

## Columns

`image` (the frame), `action`, `reward`, `terminated`, `truncated`, `is_first`, `is_last` (the final
observation, with a null action), `behaviour` (who acted: random, checkpoint, explorer, teacher),
`context` (JSON of the env's proprioceptive fields){% if "state" in info.observation %}, `state`{% endif %};
labels `{{ "a_v_index" if info.action_choices else "a_v" }}` (the teacher's action), `milestone` + `potential`
(Phi_raw), `objects`, `judge`, each with its `*_status`; `mask` (the sum of the phrase masks,
Semore eq. 4, clipped to 1) and `mask_phrases`. Frames between two queries carry the last queried
label. Training shards in `wds/` hold the same samples with per-phrase masks (`masks.npz`).

Provenance of each label, per task prefix (`a_v`, `milestone`, `objects`, `judge`):
`<prefix>_queried` (the teacher saw this frame; false: the row carries the label of an earlier
queried frame of the episode), `<prefix>_source_key` (the `key` of that queried frame),
`<prefix>_teacher_id` (who answered), `<prefix>_raw_text` (the answer as it came back, on queried
rows) and `<prefix>_parse_detail` (how it parsed). With them, the answers can be re-audited
without the pipeline.

## Provenance

{% if info.acting_agent %}Collected in labelling round {{ info.acting_agent.round }} of run `{{ info.acting_agent.run }}` by the agent `{{ info.acting_agent.agent }}` (weights sha256 `{{ info.acting_agent.agent_sha256 }}`, actions: {{ info.acting_agent.explore }}); its frames were labelled in batch after collection, and the agent of the next round trains on them.
{% endif %}{% if info.acting_teacher %}Teacher phases of the collection acted on `{{ info.acting_teacher.id }}` (ERPv D.1's RAE); the labels
are the labelling teacher's, asked afterwards. {% endif %}Made with {% for name, v in info.software.items() %}`{{ name }} {{ v }}`{{ ", " if not loop.last else "." }}{% endfor %}

## License and citation

The dataset is released under the MIT license, as the pipeline that made it (`LICENSE`). The
labels serve the methods of these papers; cite them if you use the labels for those methods:

```bibtex
{{ citations }}
```

## Load

```python
from datasets import load_dataset
ds = load_dataset("path/to/this/folder")["train"]
```

or the training shards with frame stacking: `pipeline.dataset.loader.iter_stacked("wds")`.
Share it with `dvc push` (the folder is a DVC output) or upload the folder to the Hub as a
dataset repo (`hf upload <user>/<name> . --repo-type dataset`, from huggingface_hub).

## Prompts
{% for task, text in info.prompts.items() %}
### {{ task }}

```
{{ text }}
```
{% endfor %}
"""


def render_card(info: dict[str, Any], features: Any) -> str:
    """The card: `card_header` and a body that says what the data is and how it was made."""
    statuses = sorted({s for counts in info["parse_status"].values() for s in counts})
    scripted = any(t.startswith("scripted:") for t in info["teacher_ids"])
    return card_header(info, features) + (
        Environment(keep_trailing_newline=True)
        .from_string(_CARD)
        .render(
            info=info,
            c=info["counts"],
            statuses=statuses,
            scripted=scripted,
            size_category=size_category(info["counts"]["samples"]),
            citations=CITATIONS,
            erpv_seconds=ERPV_SECONDS_PER_CALL,
        )
    )
