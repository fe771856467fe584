"""nanobragg.torch: gradients through torch autograd against finite
differences (gradcheck, forward and reverse mode) and against the engine's
own derivative images."""

import time
import threading

import numpy as np
import pytest

import nanobragg

torch = pytest.importorskip("torch")
from nanobragg.torch import render  # noqa: E402

# small, triclinic, tilted and misset: every parameter below moves the image
MODEL = ("-default_F 100 -cell 70 80 90 80 95 100 -misset 3 -2 5 -lambda 1.1 -N 4 "
         "-distance 60 -detpixels 10 -pixel 1.5 -Xbeam 8 -Ybeam 6 -detector_rotx 2 "
         "-polar 0.9 -mosaic 0.3 -mosaic_domains 2 -oversample 1")
NAMES = ["distance", "Xbeam", "Ybeam", "detector_rotx", "cell_a", "cell_b", "cell_gamma",
         "misset_x", "misset_y", "misset_z", "Na", "lambda", "polar"]


def leaves(model):
    return [torch.tensor(model[n], dtype=torch.float64, requires_grad=True) for n in NAMES]


def test_gradcheck_on_thirteen_parameters():
    model = nanobragg.from_args(MODEL)
    xs = leaves(model)

    def f(*values):
        return render(model, **dict(zip(NAMES, values)))

    image = f(*xs)
    assert image.dtype == torch.float64 and image.shape == (10, 10) and image.max() > 0
    # reverse mode (backward: the engine's Jᵀv) and forward mode (jvp: J·t)
    # against central differences of the float64 image
    assert torch.autograd.gradcheck(f, xs, eps=1e-6, atol=1e-6, rtol=1e-4,
                                    check_forward_ad=True, check_backward_ad=True)


def test_values_are_the_flags_and_setting_them_renders_the_same():
    model = nanobragg.from_args(MODEL)
    assert model["distance"] == 60.0 and model["misset_y"] == -2.0 and model["Na"] == 4.0
    moved = nanobragg.from_args(MODEL)
    moved["distance"] = 61.5
    moved["cell_a"] = 71.0
    want = nanobragg.simulate(nanobragg.from_args(
        MODEL.replace("-distance 60", "-distance 61.5").replace("-cell 70", "-cell 71")))
    assert np.array_equal(nanobragg.simulate(moved), want)
    with pytest.raises(nanobragg.Error, match="bogus"):
        model["bogus"]


def test_backward_is_the_weighted_sum_of_the_derivative_images():
    model = nanobragg.from_args(MODEL.replace("-detpixels 10", "-detpixels 48"))
    names = ["distance", "cell_a", "lambda"]
    xs = [torch.tensor(model[n], dtype=torch.float64, requires_grad=True) for n in names]
    image = render(model, **dict(zip(names, xs)))
    w = torch.linspace(-1, 2, image.numel(), dtype=torch.float64).reshape(image.shape)
    (image * w).sum().backward()
    _, d = nanobragg.jacobian(model, names)
    for x, di in zip(xs, d):
        want = float((di.astype(np.float64) * w.numpy()).sum())
        assert abs(x.grad.item() - want) <= 1e-5 * np.abs(di * w.numpy()).sum()
    # the gradient of a sum reaches the engine as one number broadcast
    xs = [torch.tensor(model[n], dtype=torch.float64, requires_grad=True) for n in names]
    render(model, **dict(zip(names, xs))).sum().backward()
    for x, di in zip(xs, d):
        want = float(di.astype(np.float64).sum())
        assert abs(x.grad.item() - want) <= 1e-5 * np.abs(di).sum()
    # a loss over the transposed image: its gradient is a transposed view
    # (strides (1, fast)) holding the weights w of the first loss
    xs = [torch.tensor(model[n], dtype=torch.float64, requires_grad=True) for n in names]
    image = render(model, **dict(zip(names, xs)))
    (image.t() * w.t().contiguous()).sum().backward()
    for x, di in zip(xs, d):
        want = float((di.astype(np.float64) * w.numpy()).sum())
        assert abs(x.grad.item() - want) <= 1e-5 * np.abs(di * w.numpy()).sum()


def test_a_loss_descends_with_torch_optim():
    truth = nanobragg.from_args(MODEL.replace("-detpixels 10", "-detpixels 32"))
    observed = torch.from_numpy(nanobragg.simulate(truth).astype(np.float64))
    distance = torch.tensor(60.5, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.Adam([distance], lr=0.05)
    losses = []
    for _ in range(40):
        opt.zero_grad()
        loss = (render(truth, distance=distance) - observed).square().sum()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert min(losses) < 0.01 * losses[0] and abs(distance.item() - 60.0) < 0.1


def test_float32_tensors_give_a_float32_image():
    model = nanobragg.from_args(MODEL)
    d = torch.tensor(60.0, requires_grad=True)
    image = render(model, distance=d)
    assert image.dtype == torch.float32
    image.sum().backward()
    assert d.grad.dtype == torch.float32 and d.grad.item() != 0.0


HKL_MODEL = ("-cell 30 34 38 88 93 95 -lambda 1.5 -N 3 -distance 50 -detpixels 23 "
             "-pixel 1 -mosaic 0.5 -mosaic_domains 2 -default_F 5")


def grid_model(tmp_path, interpolate):
    hkl = tmp_path / "grid.hkl"
    rows = [f"{h} {k} {l} {10 + abs(7 * h + 3 * k + l)}"
            for h in range(-3, 4) for k in range(-3, 4) for l in range(-3, 4)]
    hkl.write_text("\n".join(rows) + "\n")
    flag = "-interpolate" if interpolate else "-nointerpolate"
    return nanobragg.from_args(f"{HKL_MODEL} -hkl {hkl} {flag}")


@pytest.mark.parametrize("interpolate", [False, True], ids=["nearest", "tricubic"])
def test_loss_gradient_by_every_structure_factor(tmp_path, interpolate):
    """d(loss)/dF over the whole grid against central differences."""
    model = grid_model(tmp_path, interpolate)
    origin, f0 = model.structure_factors
    assert origin == (-3, -3, -3) and f0.shape == (7, 7, 7) and f0[3, 3, 3] == 10
    observed = torch.from_numpy(nanobragg.simulate(model).astype(np.float64)) * 0.7
    F = torch.tensor(f0, requires_grad=True)
    cell_a = torch.tensor(30.0, dtype=torch.float64, requires_grad=True)

    def loss(F, cell_a):
        return (render(model, F=F, cell_a=cell_a) - observed).square().sum()

    loss(F, cell_a).backward()
    g = F.grad.numpy()
    read = np.flatnonzero(g)
    assert len(read) >= 8
    order = np.argsort(-np.abs(g.ravel()))
    h = 1e-3
    for i in list(order[:6]) + list(order[len(read):][:: 50][:3]):
        e = np.zeros(f0.size)
        e[i] = h
        up = loss(torch.tensor(f0 + e.reshape(f0.shape)), 30.0).item()
        dn = loss(torch.tensor(f0 - e.reshape(f0.shape)), 30.0).item()
        fd = (up - dn) / (2 * h)
        assert abs(g.ravel()[i] - fd) <= 1e-6 * np.abs(g).max(), (i, g.ravel()[i], fd)
    assert cell_a.grad.item() != 0.0


def test_structure_factors_from_arrays_are_an_hkl_file(tmp_path):
    model = grid_model(tmp_path, False)
    origin, f0 = model.structure_factors
    other = nanobragg.from_args(HKL_MODEL)
    assert other.structure_factors is None
    idx = np.indices(f0.shape).reshape(3, -1).T + np.array(origin)
    other.set_structure_factors(idx, f0.ravel())
    assert np.array_equal(nanobragg.simulate(other), nanobragg.simulate(model))
    with pytest.raises(nanobragg.Error, match="shape"):
        other.set_structure_factors(idx[:, :2], f0.ravel())
    with pytest.raises(nanobragg.Error, match="shape"):
        render(model, F=torch.zeros(3, 3, 3, dtype=torch.float64))


def test_gradients_take_their_inputs_dtype_and_are_not_differentiated_again(tmp_path):
    model = grid_model(tmp_path, False)
    F = torch.tensor(model.structure_factors[1], dtype=torch.float32, requires_grad=True)
    cell_a = torch.tensor(30.0, dtype=torch.float64, requires_grad=True)
    render(model, F=F, cell_a=cell_a).sum().backward()
    assert F.grad.dtype == torch.float32 and cell_a.grad.dtype == torch.float64
    assert F.grad.abs().sum() > 0
    # a number beside a float32 tensor keeps its float64 digits (the image is float32)
    image = render(model, F=F, cell_a=30.123456789)
    p = nanobragg.Params(model, ["cell_a"], F=F.detach().double().numpy())
    want = p.image(np.array([30.123456789])).astype(np.float32)
    assert image.dtype == torch.float32 and np.array_equal(image.detach().numpy(), want)
    # a second derivative through the render is refused, not silently left out
    # of one that also has other terms, nor taken as 0; the first derivative
    # in a graph (create_graph=True) is the same number
    loss = render(model, cell_a=cell_a).square().sum() + cell_a ** 3
    (g,) = torch.autograd.grad(loss, cell_a, create_graph=True)
    (want,) = torch.autograd.grad(render(model, cell_a=cell_a).square().sum() + cell_a ** 3, cell_a)
    assert g.item() == want.item()
    with pytest.raises(RuntimeError, match="not differentiable"):
        g.backward()
    with pytest.raises(RuntimeError, match="not differentiable"):
        torch.autograd.functional.hessian(
            lambda a: render(model, cell_a=a).square().sum(), cell_a.detach())
    # by F alone, of a loss linear in the image (whose gradient is a constant)
    with pytest.raises(RuntimeError, match="not differentiable"):
        torch.autograd.functional.hessian(
            lambda f: render(model, F=f, cell_a=30.0).sum(), F.detach().double())
    # forward mode with F given as a constant tensor (whose tangent torch
    # hands as zeros) is forward mode by the values alone
    import torch.autograd.forward_ad as fwAD
    p = nanobragg.Params(model, ["cell_a"])
    with fwAD.dual_level():
        a = fwAD.make_dual(torch.tensor(30.0, dtype=torch.float64),
                           torch.tensor(1.0, dtype=torch.float64))
        tangent = fwAD.unpack_dual(render(model, F=F.detach(), cell_a=a)).tangent
    assert np.allclose(tangent.numpy(), p.jvp(np.array([30.0]), np.array([1.0])), rtol=1e-6)


def test_a_parameter_of_several_elements_is_refused():
    model = nanobragg.from_args(MODEL)
    with pytest.raises(ValueError, match="distance has 2 elements"):
        nanobragg.torch.render(model, distance=torch.tensor([100.0, 101.0], dtype=torch.float64))
