"""PyTorch autograd over the nanobragg engine.

    import torch, nanobragg as nb
    from nanobragg.torch import render
    experiment = nb.Experiment(
        beam=nb.Beam(lambda_a=1.0),
        crystal=nb.Crystal(cell=(100, 100, 100, 90, 90, 90), N=5, default_F=100),
        detector=nb.Detector(distance_mm=100, fpixels=128, spixels=128))
    distance = torch.tensor(100.0, dtype=torch.float64, requires_grad=True)
    image = render(experiment, distance=distance)     # (slow, fast) tensor
    image.square().sum().backward()                   # distance.grad

Parameters are named as for `-gradient` ("distance", "cell_a", "misset_x",
"lambda", ...), in the units of their flags; `F` is the structure-factor grid
(`experiment.structure_factors[1]`'s shape). The image is rendered by the engine
in float64; `backward` asks the engine for Jᵀv (no derivative image is formed
where the engine can avoid it) and for Σ v·∂I/∂F over the grid; `jvp`
(forward mode) for J·t by the parameters.
"""

import numpy as np
import torch

from ._nanobragg import Params

__all__ = ["Render", "render"]


def _numpy(t):
    return t.detach().to("cpu", torch.float64).contiguous().numpy()


class _FirstOrder(torch.autograd.Function):
    """The engine's gradient in a graph built with `create_graph=True`: a
    tensor that depends on the values, F and the image's gradient, whose own
    derivative the engine does not give (asked for, it raises: torch would
    otherwise take it as 0, as once_differentiable lets autograd.grad and
    torch.autograd.functional.hessian do)."""

    @staticmethod
    def forward(gradient, values, F, grad_image):
        return gradient.clone()

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, _):
        raise RuntimeError(
            "nanobragg.torch: the render's gradient is not differentiable (a Hessian, a "
            "second derivative); nanobragg.jacobian gives first derivatives")


class Render(torch.autograd.Function):
    """The image of `params` (a `nanobragg.Params`, which holds the
    structure factors `F` it was made with) at `values` (a 1-D tensor, one
    value per parameter), differentiable by `values` and `F`."""

    @staticmethod
    def forward(params, values, F, dtype, out):
        image = torch.from_numpy(params.image(_numpy(values), dtype))
        return image.to(device=values.device, dtype=out)

    @staticmethod
    def setup_context(ctx, inputs, output):
        params, values, F, _, out = inputs
        ctx.out = out
        ctx.params = params
        ctx.values = _numpy(values)
        ctx.like = values
        ctx.f_like = F

    @staticmethod
    def backward(ctx, grad_image):
        out = lambda a, like: torch.from_numpy(a).to(device=like.device, dtype=like.dtype)
        g_values = g_f = None
        if ctx.needs_input_grad[1]:
            # the gradient of a sum is one number broadcast (strides 0), which
            # the engine reads as such: made contiguous, or converted to
            # float64 on the CPU, it is 8 MB at 1024²
            if grad_image.numel() > 0 and all(s == 0 for s in grad_image.stride()):
                w = grad_image.reshape(-1)[0].item()
                v = np.broadcast_to(np.float64(w), tuple(grad_image.shape))
            else:
                v = _numpy(grad_image)
            g_values = out(ctx.params.vjp(ctx.values, v), ctx.like)
        if ctx.needs_input_grad[2]:
            g_f = out(ctx.params.sf_vjp(ctx.values, _numpy(grad_image)), ctx.f_like)
        if torch.is_grad_enabled():
            # create_graph=True (a Hessian, a second derivative): the engine's
            # gradients enter the graph as numbers whose own derivative is
            # refused when taken, not counted as 0
            if g_values is not None:
                g_values = _FirstOrder.apply(g_values, ctx.like, ctx.f_like, grad_image)
            if g_f is not None:
                g_f = _FirstOrder.apply(g_f, ctx.like, ctx.f_like, grad_image)
        return None, g_values, g_f, None, None

    @staticmethod
    def jvp(ctx, _params_t, values_t, f_t, _dtype_t, _out_t):
        # (torch hands F's tangent as zeros where F is a constant tensor)
        if f_t is not None and bool(f_t.ne(0).any()):
            raise NotImplementedError("nanobragg.torch: forward mode by F (use backward)")
        d = torch.from_numpy(ctx.params.jvp(ctx.values, _numpy(values_t)))
        return d.to(device=ctx.like.device, dtype=ctx.out)


def render(experiment, F=None, dtype="float64", threads=None, **values):
    """The image of `experiment` (a `nanobragg.Experiment`, from objects or
    `nanobragg.from_args`) with the named parameters set to `values` (tensors
    of one element, or numbers) and, with `F`, the structure factors of its
    grid replaced by `F`;
    differentiable by every tensor among them. The image has the tensors'
    floating-point dtype (float64 when there is none) and their device;
    `dtype` picks the kernels' precision as in `nanobragg.simulate`."""
    if not values and F is None:
        raise TypeError("render: name a parameter (e.g. distance=...) or give F")
    names = list(values)
    for name, v in values.items():
        n = torch.as_tensor(v).numel()
        if n != 1:
            raise ValueError(f"render: {name} has {n} elements; a parameter is one number "
                             "(a tensor of one element)")
    tensors = [v for v in values.values() if isinstance(v, torch.Tensor)]
    if isinstance(F, torch.Tensor):
        tensors.append(F)
    like = tensors[0] if tensors else torch.zeros((), dtype=torch.float64)
    kind = like.dtype if like.is_floating_point() else torch.float64
    # the values in float64 whatever the image's dtype: a number given beside
    # a float32 tensor keeps its digits (the gradient of each float32 tensor
    # comes back float32 through its conversion)
    f64 = torch.float64
    stacked = torch.stack(
        [torch.as_tensor(v, dtype=f64, device=like.device).reshape(()) for v in values.values()]
    ) if values else torch.zeros(0, dtype=f64, device=like.device)
    f_array = None if F is None else np.asarray(_numpy(torch.as_tensor(F)))
    params = Params(experiment, names, threads, f_array)
    return Render.apply(params, stacked, F if isinstance(F, torch.Tensor) else None, dtype, kind)
