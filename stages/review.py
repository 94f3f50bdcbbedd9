"""Label review in an external tool (not a DVC stage: a person works in between).

Export a label table as Label Studio tasks (one JSON file and labelling config per task, frames
inline, the teacher's answers as pre-annotations), then import the JSON export of the corrected
tasks as `human:<reviewer>`'s corrections into `corrections/<env>.jsonl`:

    python -m stages.review export --rollouts data/rollouts/MountainCar-v0 \\
        --labels data/labels/MountainCar-v0.parquet --out review/MountainCar-v0 --tasks milestone
    python -m stages.review import --rollouts data/rollouts/MountainCar-v0 \\
        --reviewer alice --export export.json

Then `dvc repro`: that env's label stage overlays the corrections on `label.teacher`'s answers
(the other prompts keep the teacher's answers). Commit corrections/ with git: it is the only copy.
"""

from __future__ import annotations

import argparse
import sys

from pipeline.core.config import register_brought_envs
from pipeline.core.errors import PipelineError, print_error
from pipeline.teach.labelling.exchange import export_label_studio, import_label_studio
from pipeline.teach.labelling.review import read_selection
from pipeline.teach.labels.tasks import TASKS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--params",
        default="params.yaml",
        help="params whose brought envs (env.<id>.make) may be reviewed (read if present)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    out = sub.add_parser("export", help="a label table as Label Studio tasks")
    out.add_argument("--rollouts", required=True)
    out.add_argument("--labels", required=True)
    out.add_argument("--out", required=True, help="directory for <task>.json and its config")
    out.add_argument(
        "--tasks", nargs="+", choices=sorted(TASKS), help="only these label tasks (default: all)"
    )
    out.add_argument("--statuses", nargs="+", help="only rows with these parse statuses")
    out.add_argument(
        "--selection",
        help='only the rows of this file: what the audit page\'s "export this selection" saved',
    )
    into = sub.add_parser("import", help="Label Studio's JSON export into corrections/<env>.jsonl")
    into.add_argument("--rollouts", required=True)
    into.add_argument("--reviewer", required=True, help="the corrections' teacher id: human:<name>")
    into.add_argument(
        "--corrections", help="the corrections file to add to (default: corrections/<env>.jsonl)"
    )
    into.add_argument("--export", required=True, help="Label Studio JSON export (a list)")
    args = parser.parse_args(argv)
    try:
        register_brought_envs(args.params)
        if args.command == "export":
            selection = None if args.selection is None else read_selection(args.selection)
            summary = export_label_studio(
                args.rollouts, args.labels, args.out, tasks=args.tasks, statuses=args.statuses,
                selection=selection,
            )  # fmt: skip
            for task, n in summary.tasks.items():
                print(f"{args.out}/{task}.json: {n} tasks ({task}.label_config.xml beside it)")
        else:
            result = import_label_studio(
                args.export, args.rollouts, args.reviewer, corrections=args.corrections
            )
            print(
                f"{result.path}: {sum(result.imported.values())} corrections by "
                f"{result.teacher_id} written ({dict(result.imported)}; {result.replaced} of them "
                f"replace an earlier correction), {result.unchanged} already there, "
                f"{result.skipped} tasks without an annotation. `dvc repro` relabels the env; "
                f"commit {result.path} with git"
            )
    except (PipelineError, OSError) as exc:
        print_error(exc)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
