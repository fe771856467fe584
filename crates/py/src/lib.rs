//! `nanobragg._nanobragg`: the pipeline's invocations rendered into numpy
//! arrays. A thin layer: parsing, setup and rendering are the library's
//! (`nanobragg-pipeline`, `nanobragg-core`); errors become
//! `nanobragg.Error` carrying the command line's message. The GIL is
//! released while rendering.

use nanobragg_core::config::SfSource;
use nanobragg_core::diff::loss::LossKind;
use nanobragg_core::diff::{jacobian_of, Param};
use nanobragg_core::render::{Precision, RenderOptions};
use nanobragg_core::sf::{HklEntry, HklGrid};
use nanobragg_pipeline::invocation::{Device, Invocation};
use nanobragg_pipeline::render::render_plan;
use nanobragg_pipeline::Parameters;
use numpy::{
    PyArray1, PyArray2, PyArray3, PyArrayMethods, PyReadonlyArray1, PyReadonlyArray2,
    PyReadonlyArray3, PyUntypedArrayMethods,
};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3::types::PyString;

create_exception!(
    nanobragg,
    Error,
    PyException,
    "A bad command line, file or model: the message the command line prints."
);

fn error(e: impl std::fmt::Display) -> PyErr {
    Error::new_err(e.to_string())
}

/// A simulation as the command line describes it: detector, beam, crystal,
/// structure factors and sampling, with the files it names already read.
#[pyclass(module = "nanobragg._nanobragg")]
#[derive(Clone)]
struct Model {
    inv: Invocation,
    args: Vec<String>,
}

#[pymethods]
impl Model {
    /// The command line this model was built from (values set since are
    /// not in it).
    #[getter]
    fn args(&self) -> Vec<String> {
        self.args.clone()
    }

    /// The image shape, (slow, fast) pixels.
    #[getter]
    fn shape(&self) -> PyResult<(usize, usize)> {
        let (plan, _) = self.inv.plan().map_err(|e| error(format!("{e:#}")))?;
        Ok((plan.detector.spixels, plan.detector.fpixels))
    }

    fn __repr__(&self) -> String {
        format!("nanobragg.from_args({:?})", self.args.join(" "))
    }

    /// The value of a parameter (a `-gradient` name such as "distance",
    /// "cell_a", "misset_x", "lambda") in the unit of its flag, as the run
    /// uses it (defaults resolved).
    fn __getitem__(&self, name: &str) -> PyResult<f64> {
        Ok(self.parameters(&[name.to_string()])?.start()[0])
    }

    /// Set a parameter (in the unit of its flag); the other flags keep
    /// their values.
    fn __setitem__(&mut self, name: &str, value: f64) -> PyResult<()> {
        let p = self.parameters(&[name.to_string()])?;
        let oversample = self.inv.config.sampling.oversample;
        let mut cfg = p.config(&[value]).map_err(|e| error(format!("{e:#}")))?;
        // `Parameters` holds the automatic oversampling fixed; a set value keeps it automatic
        cfg.sampling.oversample = oversample;
        self.inv.config = cfg;
        Ok(())
    }

    /// The structure-factor grid the model renders with: ((h_min, k_min,
    /// l_min), F) with F a float64 array of shape (h, k, l) ranges (points
    /// of the grid no entry gave hold `default_F`, as in nanoBragg.c).
    /// `None` with `-default_F` alone.
    #[getter]
    fn structure_factors<'py>(&self, py: Python<'py>) -> PyResult<Option<GridArray<'py>>> {
        let (plan, _) = self.inv.plan().map_err(pyerr)?;
        let Some(g) = plan.grid.as_ref() else { return Ok(None) };
        let f = unpadded(g, &g.data);
        let shape = [g.h_range() as usize, g.k_range() as usize, g.l_range() as usize];
        Ok(Some(((g.h_min, g.k_min, g.l_min), PyArray1::from_vec(py, f).reshape(shape)?)))
    }

    /// Use these structure factors, as an `-hkl` file would give them:
    /// `hkl` an integer array of shape (n, 3), `F` n amplitudes.
    #[pyo3(name = "set_structure_factors")]
    fn set_structure_factors_py(
        &mut self,
        hkl: PyReadonlyArray2<'_, i64>,
        #[allow(non_snake_case)] F: PyReadonlyArray1<'_, f64>,
    ) -> PyResult<()> {
        let (hkl, f) = (hkl.as_array(), F.as_slice()?);
        if hkl.ncols() != 3 || hkl.nrows() != f.len() {
            return Err(error(format!(
                "structure factors: hkl of shape {:?} for {} amplitudes (want ({}, 3))",
                hkl.shape(),
                f.len(),
                f.len()
            )));
        }
        let entries = (hkl.rows().into_iter().zip(f))
            .map(|(r, &f)| HklEntry { h: r[0] as f64, k: r[1] as f64, l: r[2] as f64, f })
            .collect();
        self.inv.config.sf.source = SfSource::Hkl(entries);
        self.inv.plan().map_err(pyerr)?;
        Ok(())
    }
}

impl Model {
    /// `names` of this model as numbers.
    fn parameters(&self, names: &[String]) -> PyResult<Parameters> {
        let params = parse_params(names)?;
        let (_, seeds) = self.inv.plan().map_err(|e| error(format!("{e:#}")))?;
        Parameters::new(self.inv.config.clone(), seeds.setup, params)
            .map_err(|e| error(format!("{e:#}")))
    }
}

fn parse_params(names: &[String]) -> PyResult<Vec<Param>> {
    names.iter().map(|p| p.parse::<Param>()).collect::<Result<_, _>>().map_err(error)
}

/// Chosen parameters of a model as numbers: the image at any values, and
/// its products with the Jacobian (the engine's reverse and forward mode).
/// `nanobragg.torch` builds on it.
#[pyclass(frozen, module = "nanobragg._nanobragg")]
struct Params {
    p: Parameters,
    threads: usize,
}

impl Params {
    fn opts(&self) -> RenderOptions {
        RenderOptions { threads: self.threads }
    }
    fn shape(&self) -> [usize; 2] {
        let d = &self.p.plan().detector;
        [d.spixels, d.fpixels]
    }
}

fn pyerr(e: anyhow::Error) -> PyErr {
    error(format!("{e:#}"))
}

#[pymethods]
impl Params {
    /// The parameters of `model` named `names` (`-gradient` names), with a
    /// thread count for their renders.
    /// `F`: structure factors for the model's grid (the shape of
    /// `model.structure_factors[1]`) in place of the model's.
    #[new]
    #[pyo3(signature = (model, names, threads = None, F = None))]
    fn new(
        model: &Model,
        names: Vec<String>,
        threads: Option<usize>,
        #[allow(non_snake_case)] F: Option<PyReadonlyArray3<'_, f64>>,
    ) -> PyResult<Self> {
        let mut model = model.clone();
        if let Some(f) = F {
            let (plan, _) = model.inv.plan().map_err(pyerr)?;
            let Some(g) = plan.grid else {
                return Err(error("F: the model has no structure-factor grid (give -hkl)"));
            };
            let shape = [g.h_range() as usize, g.k_range() as usize, g.l_range() as usize];
            if f.shape() != shape {
                return Err(error(format!(
                    "F of shape {:?} for a grid of shape {shape:?}",
                    f.shape()
                )));
            }
            let values: Vec<f64> = f.as_array().iter().copied().collect();
            model.inv.config.sf.source = SfSource::Dump(padded(&g, &values));
        }
        let p = model.parameters(&names)?;
        Ok(Params { p, threads: threads.unwrap_or(model.inv.threads) })
    }

    /// The names, in order.
    #[getter]
    fn names(&self) -> Vec<String> {
        self.p.params().iter().map(|p| p.name().to_string()).collect()
    }

    /// The units of the values, in order.
    #[getter]
    fn units(&self) -> Vec<String> {
        self.p.params().iter().map(|p| p.unit().to_string()).collect()
    }

    /// Their values in the model.
    #[getter]
    fn start<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<f64>> {
        PyArray1::from_slice(py, self.p.start())
    }

    /// The image (photons per pixel, float64, (slow, fast)) at `values`;
    /// `dtype` as for `simulate` (the kernels' precision).
    #[pyo3(signature = (values, dtype = "float64"))]
    fn image<'py>(
        &self,
        py: Python<'py>,
        values: PyReadonlyArray1<'py, f64>,
        dtype: &str,
    ) -> PyResult<Bound<'py, PyArray2<f64>>> {
        let precision = precision(dtype)?;
        let values = values.as_slice()?.to_vec();
        let image = py.detach(|| self.p.image(&values, self.opts(), precision)).map_err(pyerr)?;
        PyArray1::from_vec(py, image).reshape(self.shape())
    }

    /// `Jᵀv` at `values`: for each parameter, `Σ v · d pixel / d parameter`
    /// with `v` of the image's shape, computed by the engine without
    /// forming the derivative images where it can.
    fn vjp<'py>(
        &self,
        py: Python<'py>,
        values: PyReadonlyArray1<'py, f64>,
        v: PyReadonlyArray2<'py, f64>,
    ) -> PyResult<Bound<'py, PyArray1<f64>>> {
        self.check_shape(v.shape())?;
        let values = values.as_slice()?.to_vec();
        let v = v.as_array().iter().copied().collect::<Vec<f64>>();
        let g = py.detach(|| self.p.vjp(&values, &v, self.opts())).map_err(pyerr)?;
        Ok(PyArray1::from_vec(py, g))
    }

    /// `Σ v · d pixel / d F` at `values` for every structure factor of the
    /// grid, of the shape of `model.structure_factors[1]`, computed by the
    /// engine (nearest-neighbour or tricubic, as the model looks them up).
    fn sf_vjp<'py>(
        &self,
        py: Python<'py>,
        values: PyReadonlyArray1<'py, f64>,
        v: PyReadonlyArray2<'py, f64>,
    ) -> PyResult<Bound<'py, PyArray3<f64>>> {
        self.check_shape(v.shape())?;
        let values = values.as_slice()?.to_vec();
        let v = v.as_array().iter().copied().collect::<Vec<f64>>();
        let out = py.detach(|| self.p.sf_vjp(&values, &v, self.opts())).map_err(pyerr)?;
        let g = self.p.plan().grid.as_ref().expect("sf_vjp_of needs a grid");
        let shape = [g.h_range() as usize, g.k_range() as usize, g.l_range() as usize];
        PyArray1::from_vec(py, unpadded(g, &out.gradient)).reshape(shape)
    }

    /// `J·t` at `values`: the derivative of every pixel along the
    /// direction `t` (one number per parameter), of the image's shape.
    fn jvp<'py>(
        &self,
        py: Python<'py>,
        values: PyReadonlyArray1<'py, f64>,
        t: PyReadonlyArray1<'py, f64>,
    ) -> PyResult<Bound<'py, PyArray2<f64>>> {
        let (values, t) = (values.as_slice()?.to_vec(), t.as_slice()?.to_vec());
        let d = py.detach(|| self.p.jvp(&values, &t, self.opts())).map_err(pyerr)?;
        PyArray1::from_vec(py, d).reshape(self.shape())
    }

    /// The loss of the image at `values` against `observed` ("sse" or
    /// "poisson"; `skip`: pixels to leave out) as a dict: value, gradient,
    /// hessian (Gauss–Newton), covariance and standard errors (None where
    /// singular), pixels used.
    #[pyo3(signature = (values, observed, loss = "sse", skip = None))]
    fn loss<'py>(
        &self,
        py: Python<'py>,
        values: PyReadonlyArray1<'py, f64>,
        observed: PyReadonlyArray2<'py, f32>,
        loss: &str,
        skip: Option<PyReadonlyArray2<'py, bool>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        self.check_shape(observed.shape())?;
        let kind: LossKind = loss.parse().map_err(error)?;
        let values = values.as_slice()?.to_vec();
        let observed: Vec<f32> = observed.as_array().iter().copied().collect();
        let skip: Option<Vec<bool>> = match skip {
            Some(s) => {
                self.check_shape(s.shape())?;
                Some(s.as_array().iter().copied().collect())
            }
            None => None,
        };
        let ev = py
            .detach(|| self.p.loss(&values, kind, &observed, skip.as_deref(), self.opts()))
            .map_err(pyerr)?;
        let n = values.len();
        let d = PyDict::new(py);
        d.set_item("value", ev.value)?;
        d.set_item("gradient", PyArray1::from_slice(py, &ev.gradient))?;
        d.set_item("hessian", PyArray1::from_slice(py, &ev.hessian).reshape([n, n])?)?;
        let cov = ev.covariance().map(|c| PyArray1::from_vec(py, c).reshape([n, n])).transpose()?;
        d.set_item("covariance", cov)?;
        d.set_item("standard_errors", ev.standard_errors().map(|s| PyArray1::from_vec(py, s)))?;
        d.set_item("pixels", ev.pixels)?;
        Ok(d)
    }
}

impl Params {
    fn check_shape(&self, shape: &[usize]) -> PyResult<()> {
        if shape != self.shape() {
            return Err(error(format!(
                "an array of shape {shape:?} for an image of shape {:?}",
                self.shape()
            )));
        }
        Ok(())
    }
}

/// `data` (in `g`'s padded layout) without the padding, h then k then l.
fn unpadded(g: &HklGrid, data: &[f64]) -> Vec<f64> {
    let mut out = Vec::with_capacity((g.h_range() * g.k_range() * g.l_range()).max(0) as usize);
    for h in 0..g.h_range() {
        for k in 0..g.k_range() {
            for l in 0..g.l_range() {
                out.push(data[g.index(h, k, l)]);
            }
        }
    }
    out
}

/// A grid with `g`'s bounds holding `values` (h, k, l without padding).
fn padded(g: &HklGrid, values: &[f64]) -> HklGrid {
    let mut out = HklGrid { data: vec![0.0; g.data.len()], ..g.clone() };
    let mut it = values.iter();
    for h in 0..g.h_range() {
        for k in 0..g.k_range() {
            for l in 0..g.l_range() {
                let i = out.index(h, k, l);
                out.data[i] = *it.next().expect("as many values as grid points");
            }
        }
    }
    out
}

fn precision(dtype: &str) -> PyResult<Precision> {
    Ok(match dtype {
        "float64" => Precision::Fast64,
        "exact" => Precision::Exact64,
        "float32" => Precision::Fast32,
        other => return Err(error(format!("dtype {other:?}: use float64, float32 or exact"))),
    })
}

/// The words of a command line given as one string or a list of strings.
fn words(args: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    if args.is_instance_of::<PyString>() {
        let s: String = args.extract()?;
        return Ok(s.split_whitespace().map(String::from).collect());
    }
    args.extract::<Vec<String>>()
}

/// The model of a nanoBragg command line (one string, split at whitespace,
/// or a list of words), through the command line's own parser.
#[pyfunction]
fn from_args(args: &Bound<'_, PyAny>) -> PyResult<Model> {
    let args = words(args)?;
    let inv = nanobragg_pipeline::parse_args(&args).map_err(error)?;
    Ok(Model { inv, args })
}

/// The model with a precision, device and thread count.
fn configured(
    model: &Model,
    dtype: &str,
    device: &str,
    threads: Option<usize>,
) -> PyResult<Invocation> {
    let mut inv = model.inv.clone();
    inv.precision = precision(dtype)?;
    inv.device = match device {
        "cpu" => Device::Cpu,
        "cuda" => Device::Cuda,
        "auto" => Device::Auto,
        other => return Err(error(format!("device {other:?}: use cpu, cuda or auto"))),
    };
    if let Some(t) = threads {
        inv.threads = t;
    }
    Ok(inv)
}

/// The float image (photons per pixel) of `model` as a float32 array of
/// shape (slow, fast): the content of the command line's `-floatfile`.
/// `dtype`: "float64" (default), "float32" or "exact" (bit-identical to
/// nanoBragg.c); `device`: "cpu", "cuda" or "auto".
#[pyfunction]
#[pyo3(signature = (model, dtype = "float64", device = "cpu", threads = None))]
fn simulate<'py>(
    py: Python<'py>,
    model: &Model,
    dtype: &str,
    device: &str,
    threads: Option<usize>,
) -> PyResult<Bound<'py, PyArray2<f32>>> {
    let inv = configured(model, dtype, device, threads)?;
    let (image, (sp, fp)) = py
        .detach(|| -> anyhow::Result<_> {
            let (plan, _) = inv.plan()?;
            let (image, _) = render_plan(&inv, &plan)?;
            Ok((image, (plan.detector.spixels, plan.detector.fpixels)))
        })
        .map_err(|e| error(format!("{e:#}")))?;
    numpy::PyArray1::from_vec(py, image).reshape([sp, fp])
}

/// A structure-factor grid: its first (h, k, l) and its values.
type GridArray<'py> = ((i32, i32, i32), Bound<'py, PyArray3<f64>>);

/// An image and its derivative images, as numpy arrays.
type ImageAndDerivatives<'py> = (Bound<'py, PyArray2<f32>>, Bound<'py, PyArray3<f32>>);

/// The image of `model` and its derivatives by `params` (names as for
/// `-gradient`, e.g. "distance", "cell_a"): a float32 array (slow, fast)
/// and one of shape (len(params), slow, fast), per unit of each flag.
#[pyfunction]
#[pyo3(signature = (model, params, dtype = "float64", threads = None))]
fn jacobian<'py>(
    py: Python<'py>,
    model: &Model,
    params: Vec<String>,
    dtype: &str,
    threads: Option<usize>,
) -> PyResult<ImageAndDerivatives<'py>> {
    let inv = configured(model, dtype, "cpu", threads)?;
    let params = parse_params(&params)?;
    let (j, (sp, fp)) = py
        .detach(|| -> anyhow::Result<_> {
            let (plan, seeds) = inv.plan()?;
            let opts = RenderOptions { threads: inv.threads };
            let j = jacobian_of(&inv.config, &plan, &params, seeds.setup, opts, inv.precision)?;
            Ok((j, (plan.detector.spixels, plan.detector.fpixels)))
        })
        .map_err(|e| error(format!("{e:#}")))?;
    let image = numpy::PyArray1::from_vec(py, j.image).reshape([sp, fp])?;
    let flat: Vec<f32> = j.derivatives.into_iter().flatten().collect();
    let derivatives = numpy::PyArray1::from_vec(py, flat).reshape([params.len(), sp, fp])?;
    Ok((image, derivatives))
}

/// Runs the command line `args` (without the program name), as the
/// `nanobragg` command does; returns the exit status.
#[pyfunction]
fn main(py: Python<'_>, args: Vec<String>) -> i32 {
    nanobragg_pipeline::keep_freed_memory();
    match py.detach(|| nanobragg_pipeline::main_with_args(&args)) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {e:#}");
            1
        }
    }
}

#[pymodule]
fn _nanobragg(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("Error", m.py().get_type::<Error>())?;
    m.add_class::<Model>()?;
    m.add_class::<Params>()?;
    m.add_function(wrap_pyfunction!(from_args, m)?)?;
    m.add_function(wrap_pyfunction!(simulate, m)?)?;
    m.add_function(wrap_pyfunction!(jacobian, m)?)?;
    m.add_function(wrap_pyfunction!(main, m)?)?;
    Ok(())
}
