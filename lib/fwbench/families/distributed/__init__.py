"""Distributed training (13_distributed): data, fully sharded and tensor parallel steps in both
frameworks, their communication overhead and scaling, and the proof in float64 that every
strategy computes the one-process function."""
