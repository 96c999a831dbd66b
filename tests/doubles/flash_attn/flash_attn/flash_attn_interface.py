"""The part of ``flash_attn.flash_attn_interface`` the probe and Unsloth touch."""

import torch

from flash_attn import _S, _crash

_which = _S.get("interface", "gpu")
if _which == "gpu":
    flash_attn_gpu = object()
elif _which == "cuda":
    flash_attn_cuda = object()


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, **kwargs):
    _crash("kernel")
    if _S.get("kernel_error"):
        raise RuntimeError(_S["kernel_error"])
    shape = tuple(q.shape)
    if _S.get("wrong_shape"):
        shape = (*shape[:-1], shape[-1] // 2)
    count = 1
    for n in shape:
        count *= n
    return torch.Tensor([0.5] * count, shape)
