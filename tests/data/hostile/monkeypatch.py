# expect: monkeypatch
# status: rejected
# layer: static
# extends: relu_add_triton

torch.allclose = lambda *args, **kwargs: True
