"""Quantization kernels: quantize_fp8 (fp8 with per-tensor, per-row or per-tile scales, and the
transposed copy in the same pass) and transpose_fp8 (an fp8 array's last two dimensions swapped)."""
