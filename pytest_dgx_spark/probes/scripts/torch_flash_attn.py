# G2 step of the torch child: does flash-attn import, does a tiny kernel run, and would Unsloth
# switch it on? Unsloth (unsloth/models/_utils.py) sets HAS_FLASH_ATTENTION when the capability
# major is >= 8, flash_attn is found and `from flash_attn.flash_attn_interface import
# flash_attn_gpu` (older: `flash_attn_cuda`) imports; computed here the same way, without
# importing unsloth (it patches transformers and needs a GPU).


def _fa_interface():
    try:
        from flash_attn.flash_attn_interface import flash_attn_gpu  # noqa: F401

        return "flash_attn_gpu", None
    except BaseException as first:
        try:
            from flash_attn.flash_attn_interface import flash_attn_cuda  # noqa: F401

            return "flash_attn_cuda", None
        except BaseException:
            return None, error_text(first)


def _fa_kernel(torch, flash_attn):
    shape = (1, 16, 2, 64)  # (batch, seqlen, nheads, headdim): the layout flash_attn_func takes
    q = torch.randn(*shape, device="cuda", dtype=torch.float16)
    out = flash_attn.flash_attn_func(q, q, q, causal=True)
    torch.cuda.synchronize()
    got = [int(n) for n in out.shape]
    total = float(out.float().abs().sum().item())
    finite = total == total and total not in (float("inf"), float("-inf"))
    return {"ok": got == list(shape) and finite, "shape": got, "expected": list(shape), "finite": finite}


def step_flash_attn(torch, cfg, cuda):
    """G2: import flash-attn (its behaviour is what G2 checks), run its kernel, evaluate
    Unsloth's predicate; each stage reported as it ends."""
    try:
        if _util.find_spec("flash_attn") is None:
            return data(flash_attn={"found": False})
        begin("import flash_attn", scale=3)
        import flash_attn
    except BaseException as exc:
        return data(flash_attn={"found": True, "importable": False, "error": error_text(exc)})
    fa = {
        "found": True, "importable": True, "version": str(getattr(flash_attn, "__version__", "") or ""),
        "file": str(getattr(flash_attn, "__file__", "") or ""),
    }
    data(flash_attn=fa)
    begin("flash_attn interface", scale=2)
    fa["interface"], fa["interface_error"] = _fa_interface()
    capability = cuda.get("capability")
    on_gpu = cuda.get("cuda_available") and capability
    # Unsloth needs a CUDA device to decide
    fa["unsloth_has_flash_attention"] = bool(capability[0] >= 8 and fa["interface"]) if on_gpu else None
    data(flash_attn=fa)
    if not (cuda.get("cuda_available") and cfg.get("kernel", True)):
        fa["kernel"] = {"ok": None, "skipped": "no CUDA device"}
    elif capability and capability[0] < 8:
        fa["kernel"] = {"ok": None, "skipped": "flash-attn 2 needs capability 8.0 or newer"}
    else:
        begin("flash_attn kernel", scale=3)
        try:
            fa["kernel"] = _fa_kernel(torch, flash_attn)
        except BaseException as exc:
            fa["kernel"] = {"ok": False, "error": error_text(exc)}
    data(flash_attn=fa)
