"""Rollouts: collection (behaviours, shard writer), the shard format, reader and verification."""
