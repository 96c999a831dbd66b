# G2 step of the torch child: is flash-attn importable and does a tiny kernel run?
# (Deepened by the CUDA-stack issue.)


def step_flash_attn(torch, cfg, cuda):
    begin("import flash_attn", scale=2)
    try:
        import flash_attn
    except BaseException as exc:
        data(flash_attn={"importable": False, "error": error_text(exc)})
        return
    data(flash_attn={"importable": True, "version": str(getattr(flash_attn, "__version__", ""))})
