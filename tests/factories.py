"""Tiny random checkpoints built in code: the real loading and generation paths run on them, and
nothing is downloaded."""

from __future__ import annotations

from pathlib import Path

QWEN2_VL_CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
    "<|image_pad|>", "<|video_pad|>",
]  # fmt: skip


def build_tiny_qwen2_vl(path: str | Path, seed: int = 0) -> Path:
    """A Qwen2-VL with random weights (~1 M parameters), its BPE tokenizer, image processor and
    chat template, saved with save_pretrained so from_pretrained(path) loads it like a real one."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import (
        Qwen2TokenizerFast,
        Qwen2VLConfig,
        Qwen2VLForConditionalGeneration,
        Qwen2VLImageProcessor,
        Qwen2VLProcessor,
        Qwen2VLVideoProcessor,
    )

    path = Path(path)
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    corpus = [
        "steer: 0.5\ngas: 1\nbrake: 0\nforce: -1\npush: left none right\nmilestone: BOTTOM GOAL",
        "objects: car, road\nreasonable: yes no\nDescribe: the car is on the road.",
    ] * 20
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator(corpus, trainer)
    tokenizer = Qwen2TokenizerFast(
        tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>", unk_token=None
    )
    tokenizer.chat_template = QWEN2_VL_CHAT_TEMPLATE
    image_processor = Qwen2VLImageProcessor(min_pixels=56 * 56, max_pixels=56 * 56)
    processor = Qwen2VLProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=Qwen2VLVideoProcessor(min_pixels=56 * 56, max_pixels=56 * 56),
        chat_template=QWEN2_VL_CHAT_TEMPLATE,
    )
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    config = Qwen2VLConfig(
        text_config={
            "vocab_size": len(tokenizer), "hidden_size": 32, "intermediate_size": 64,
            "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
            "max_position_embeddings": 512, "bos_token_id": ids["<|endoftext|>"],
            "eos_token_id": ids["<|im_end|>"], "pad_token_id": ids["<|endoftext|>"],
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]},
        },
        vision_config={
            "depth": 1, "embed_dim": 32, "hidden_size": 32, "num_heads": 2, "mlp_ratio": 2,
            "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2,
        },
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
    )  # fmt: skip
    torch.manual_seed(seed)
    model = Qwen2VLForConditionalGeneration(config)
    model.generation_config.eos_token_id = ids["<|im_end|>"]
    model.generation_config.pad_token_id = ids["<|endoftext|>"]
    model.save_pretrained(path)
    processor.save_pretrained(path)
    return path


def build_tiny_clipseg(path: str | Path, seed: int = 0) -> Path:
    """A CLIPSeg with random weights, its CLIP BPE tokenizer and image processor, saved with
    save_pretrained so CLIPSegForImageSegmentation.from_pretrained(path) loads it."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import (
        CLIPSegConfig,
        CLIPSegForImageSegmentation,
        CLIPSegProcessor,
        CLIPTokenizer,
        ViTImageProcessor,
    )

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    bpe = Tokenizer(models.BPE(end_of_word_suffix="</w>", unk_token="<|endoftext|>"))
    bpe.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|startoftext|>", "<|endoftext|>"],
        end_of_word_suffix="</w>",
    )
    bpe.train_from_iterator(["a red car on a grey road with green grass and a curve"] * 10, trainer)
    vocab_file, merges_file = bpe.model.save(str(path))
    tokenizer = CLIPTokenizer(vocab=vocab_file, merges=merges_file)
    config = CLIPSegConfig(
        text_config={
            "vocab_size": len(tokenizer), "hidden_size": 32, "intermediate_size": 64,
            "num_hidden_layers": 2, "num_attention_heads": 2, "max_position_embeddings": 32,
            "bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id,
        },
        vision_config={
            "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 2, "image_size": 32, "patch_size": 8,
        },
        projection_dim=16, reduce_dim=16, extract_layers=[1],
        decoder_num_attention_heads=2, decoder_intermediate_size=32,
    )  # fmt: skip
    torch.manual_seed(seed)
    CLIPSegForImageSegmentation(config).save_pretrained(path)
    image_processor = ViTImageProcessor(
        size={"height": 32, "width": 32},
        image_mean=[0.48, 0.46, 0.41],
        image_std=[0.27, 0.26, 0.28],
    )
    CLIPSegProcessor(image_processor=image_processor, tokenizer=tokenizer).save_pretrained(path)
    return path


TINY_OPEN_CLIP = {
    "embed_dim": 16,
    "vision_cfg": {"image_size": 32, "layers": 2, "width": 32, "patch_size": 8, "head_width": 16},
    "text_cfg": {"context_length": 16, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 2},
}


def build_tiny_open_clip(path: str | Path, seed: int = 0) -> tuple[str, Path, Path]:
    """A random open_clip ViT saved as a checkpoint file, with its architecture as a JSON config.
    Returns (model name, config file, checkpoint file) for create_model(name, pretrained=file)."""
    import json

    import open_clip
    import torch

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    name = "tiny-vit-test"
    config_file = path / f"{name}.json"
    config_file.write_text(json.dumps(TINY_OPEN_CLIP))
    open_clip.add_model_config(config_file)
    torch.manual_seed(seed)
    model = open_clip.create_model(name, pretrained=None)
    checkpoint = path / "tiny-vit-test.pt"
    torch.save(model.state_dict(), checkpoint)
    return name, config_file, checkpoint
