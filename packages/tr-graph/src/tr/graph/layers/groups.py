"""The memory groups layer kinds declare: parameter groups with their traits, and the running statistics'.

A new layer kind declares its own groups here or in its module (any name; the traits decide where the memory
plan puts them and which range ops cover them: tr.core.memory.Group).
"""

from __future__ import annotations

from tr.core.memory import Group

# An FC's GEMMs write FP32 weight gradients (FP16 inputs, FP32 output, so the bias gradient fuses into the dw
# GEMM: cuBLASLt's BGRADB epilogue writes the bias gradient in the output's type) and read FP16 biases (its
# BIAS epilogues take the output's type), so under AMP fc_w has no FP16 gradient and fc_b an FP16 copy.
FC_W = Group("fc_w", decayed=True, amp_copy=True)
FC_B = Group("fc_b", amp_copy=True)
FIRST_CONV = Group("first_conv", decayed=True, amp_copy=True, fp16_grad=True)
# deep convolutions never belong to the first layer: their gradients are complete before its backward
DEEP_CONV = Group("deep_conv", decayed=True, amp_copy=True, fp16_grad=True, early=True)
BN_W = Group("bn_w", norm=True)
BN_B = Group("bn_b", norm=True)

# running statistics (roles RUNNING, RUNNING_NEXT) and the inference parameters folded from them (FOLDED)
MEAN, VAR = Group("mean", order=0), Group("var", order=1)
FOLDED_BIAS, FOLDED_SCALE = Group("bias", order=0), Group("scale", order=1)
