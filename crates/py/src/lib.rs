//! `nanobragg._nanobragg`: the pipeline's invocations rendered into numpy
//! arrays. A thin layer: parsing, setup and rendering are the library's
//! (`nanobragg-pipeline`, `nanobragg-core`); errors become
//! `nanobragg.Error` carrying the command line's message. The GIL is
//! released while rendering.

use nanobragg_core::diff::{jacobian_of, Param};
use nanobragg_core::render::{Precision, RenderOptions};
use nanobragg_pipeline::invocation::{Device, Invocation};
use nanobragg_pipeline::render::render_plan;
use numpy::{PyArray2, PyArray3, PyArrayMethods};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
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
#[pyclass(frozen, module = "nanobragg._nanobragg")]
struct Model {
    inv: Invocation,
    args: Vec<String>,
}

#[pymethods]
impl Model {
    /// The command line this model was built from.
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
    inv.precision = match dtype {
        "float64" => Precision::Fast64,
        "exact" => Precision::Exact64,
        "float32" => Precision::Fast32,
        other => return Err(error(format!("dtype {other:?}: use float64, float32 or exact"))),
    };
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
    let params: Vec<Param> =
        params.iter().map(|p| p.parse::<Param>()).collect::<Result<_, _>>().map_err(error)?;
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
    m.add_function(wrap_pyfunction!(from_args, m)?)?;
    m.add_function(wrap_pyfunction!(simulate, m)?)?;
    m.add_function(wrap_pyfunction!(jacobian, m)?)?;
    m.add_function(wrap_pyfunction!(main, m)?)?;
    Ok(())
}
