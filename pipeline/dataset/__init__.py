"""The shareable dataset: training shards + a Hugging Face dataset + card, per env."""
