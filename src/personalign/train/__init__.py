"""Training: LoRA SFT, DPO and SFT-then-DPO on a benchmark's train split (TRL + PEFT), the data they
learn from, and the tokenization that masks the loss to the answer.

The data and tokenization modules are pure (no torch); `personalign.train.trainer` imports TRL,
PEFT and transformers only when a training command runs (the ``train`` extra).
"""
