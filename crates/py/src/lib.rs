//! `nanobragg._nanobragg`: the pipeline's invocations rendered into numpy
//! arrays. A thin layer: parsing, setup and rendering are the library's
//! (`nanobragg-pipeline`, `nanobragg-core`); errors become
//! `nanobragg.Error` carrying the command line's message. The GIL is
//! released while rendering.

use nanobragg_core::config::SfSource;
use nanobragg_core::diff::loss::LossKind;
use nanobragg_core::diff::Weights;
use nanobragg_core::render::{Precision, RenderOptions};
use nanobragg_core::rng::NoiseRng;
use nanobragg_core::sf::HklEntry;
use nanobragg_core::stats::{image_stats, ImageStats};
use nanobragg_pipeline::invocation::{Device, Invocation};
use nanobragg_pipeline::panels;
use nanobragg_pipeline::Parameters;
use numpy::{
    AllowTypeChange, PyArray1, PyArray2, PyArray3, PyArrayLike1, PyArrayLike2, PyArrayLike3,
    PyArrayMethods, PyUntypedArrayMethods,
};

mod experiment;
mod fields;

use experiment::Experiment;
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3::types::PyString;

/// An integer argument of type `T` whose conversion failing for its size (a
/// negative count, more than 64 bits) raises ValueError with the value,
/// where pyo3's raises OverflowError.
struct Int<T>(T);

impl<'a, 'py, T: FromPyObject<'a, 'py>> FromPyObject<'a, 'py> for Int<T> {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        T::extract(obj).map(Int).map_err(|e| {
            let e: PyErr = e.into();
            match e.is_instance_of::<pyo3::exceptions::PyOverflowError>(obj.py()) {
                true => pyo3::exceptions::PyValueError::new_err(format!(
                    "{} is out of range for this argument ({e})",
                    obj.str().map(|s| s.to_string()).unwrap_or_default()
                )),
                false => e,
            }
        })
    }
}
use std::time::Instant;

/// An array argument of any numeric type (a list, an int array, a uint16
/// image from `noise_image`, float32 or float64), converted by numpy to `T`.
type In1<'py, T> = PyArrayLike1<'py, T, AllowTypeChange>;
/// [`In1`] of two dimensions.
type In2<'py, T> = PyArrayLike2<'py, T, AllowTypeChange>;
/// [`In1`] of three dimensions.
type In3<'py, T> = PyArrayLike3<'py, T, AllowTypeChange>;

create_exception!(
    nanobragg,
    Error,
    PyException,
    "A bad command line, file or experiment: the message the command line prints."
);

fn error(e: impl std::fmt::Display) -> PyErr {
    Error::new_err(e.to_string())
}

/// The structure factors of `hkl` (an array of shape (n, 3) of whole
/// numbers) and `F` (n finite amplitudes), as an `-hkl` file gives them.
fn hkl_entries(
    hkl: In2<'_, f64>,
    #[allow(non_snake_case)] F: &Bound<'_, PyAny>,
) -> PyResult<Vec<HklEntry>> {
    refuse_complex(F.py(), F, "structure factors: F")?;
    let amplitudes: In1<'_, f64> = F.extract()?;
    let (hkl, f) = (hkl.as_array(), flat(&amplitudes));
    // (read as float, so that float and int32 indices are taken, and
    // refused where numpy's cast to an integer would truncate them; the
    // plan refuses indices too large for its grid)
    if let Some(x) = hkl.iter().find(|x| x.fract() != 0.0) {
        return Err(error(format!("structure factors: hkl holds {x}, not a Miller index")));
    }
    if hkl.ncols() != 3 || hkl.nrows() != f.len() {
        return Err(error(format!(
            "structure factors: hkl of shape {:?} for {} amplitudes (want ({}, 3))",
            hkl.shape(),
            f.len(),
            f.len()
        )));
    }
    check_amplitudes(&f, |i| {
        let r = hkl.row(i);
        format!("({} {} {})", r[0], r[1], r[2])
    })?;
    Ok((hkl.rows().into_iter().zip(f.iter()))
        .map(|(r, &f)| HklEntry { h: r[0], k: r[1], l: r[2], f })
        .collect())
}

/// Chosen parameters of an experiment as numbers: the image at any values, and
/// its products with the Jacobian (the engine's reverse and forward mode).
/// `nanobragg.torch` builds on it.
#[pyclass(frozen, module = "nanobragg._nanobragg")]
struct Params {
    p: Parameters,
    threads: usize,
    made_from: MadeFrom,
}

/// The arguments that make a [`Params`] again: experiment, names, threads, `F`.
type ParamsState<'py> = (Py<Experiment>, Vec<String>, usize, Bound<'py, PyAny>);

/// What a [`Params`] was made from, for pickling.
struct MadeFrom {
    experiment: Py<Experiment>,
    names: Vec<String>,
    /// `F`: its values and shape.
    f: Option<(Vec<f64>, [usize; 3])>,
}

impl Params {
    fn opts(&self) -> RenderOptions {
        RenderOptions::default().threads(self.threads)
    }
    fn shape(&self) -> [usize; 2] {
        let [f, s] = self.p.image_size();
        [s, f]
    }
}

fn pyerr(e: anyhow::Error) -> PyErr {
    error(format!("{e:#}"))
}

#[pymethods]
impl Params {
    /// The parameters of `experiment` named `names` (`-gradient` names), with a
    /// thread count for their renders.
    /// `F`: structure factors for the experiment's grid (the shape of
    /// `experiment.structure_factors[1]`) in place of the experiment's.
    #[new]
    #[pyo3(signature = (experiment, names, threads = None, F = None))]
    fn new(
        py: Python<'_>,
        experiment: PyRef<'_, Experiment>,
        names: Vec<String>,
        threads: Option<Int<i64>>,
        #[allow(non_snake_case)] F: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let grid: Option<In3<'_, f64>> = match F {
            Some(f) => {
                refuse_complex(f.py(), f, "F")?;
                Some(f.extract()?)
            }
            None => None,
        };
        let experiment = experiment.deep_copy(py)?;
        let given = Py::new(py, experiment.deep_copy(py)?)?;
        let mut f_given = None;
        if let Some(f) = grid {
            let (plan, _) = experiment.inv(py).plan().map_err(pyerr)?;
            let Some(g) = plan.grid else {
                return Err(error("F: the experiment has no structure-factor grid (give -hkl)"));
            };
            let shape = [g.h_range() as usize, g.k_range() as usize, g.l_range() as usize];
            if f.shape() != shape {
                return Err(error(format!(
                    "F of shape {:?} for a grid of shape {shape:?}",
                    f.shape()
                )));
            }
            let values = flat(&f);
            check_amplitudes(&values, |i| {
                let (kr, lr) = (shape[1], shape[2]);
                format!("[{}, {}, {}]", i / (kr * lr), i / lr % kr, i % lr)
            })?;
            let grid = g.with_values(&values).expect("the shape is the grid's");
            experiment.set_sf_source(py, SfSource::Dump(grid));
            f_given = Some((values.into_owned(), shape));
        }
        let p = experiment.chosen(py, &names)?;
        let threads = thread_count(threads, experiment.inv(py).threads)?;
        Ok(Params { p, threads, made_from: MadeFrom { experiment: given, names, f: f_given } })
    }

    /// Pickled as what it was made from (the experiment, the names, the thread
    /// count and `F`), for multiprocessing: unpickling makes it again.
    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<(Bound<'py, PyAny>, ParamsState<'py>)> {
        let MadeFrom { experiment, names, f } = &self.made_from;
        let f = match f {
            None => py.None().into_bound(py),
            Some((values, shape)) => {
                PyArray1::from_vec(py, values.clone()).reshape(*shape)?.into_any()
            }
        };
        let class = py.get_type::<Params>().into_any();
        Ok((class, (experiment.clone_ref(py), names.clone(), self.threads, f)))
    }

    /// The names, in order.
    #[getter]
    fn names(&self) -> Vec<String> {
        self.p.params().iter().map(|p| p.to_string()).collect()
    }

    /// The units of the values, in order.
    #[getter]
    fn units(&self) -> Vec<String> {
        self.p.params().iter().map(|p| p.unit().to_string()).collect()
    }

    /// Their values in the experiment.
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
        values: In1<'py, f64>,
        dtype: &str,
    ) -> PyResult<Bound<'py, PyArray2<f64>>> {
        let precision = precision(dtype)?;
        let values = flat(&values).into_owned();
        let image =
            interruptible(py, || self.p.image(&values, self.opts(), precision))?.map_err(pyerr)?;
        PyArray1::from_vec(py, image).reshape(self.shape())
    }

    /// `Jᵀv` at `values`: for each parameter, `Σ v · d pixel / d parameter`
    /// with `v` of the image's shape, computed by the engine without
    /// forming the derivative images where it can. A `v` that is one
    /// number broadcast (strides 0, as torch's gradient of a sum) is read
    /// as that number, without an image of it.
    fn vjp<'py>(
        &self,
        py: Python<'py>,
        values: In1<'py, f64>,
        v: In2<'py, f64>,
    ) -> PyResult<Bound<'py, PyArray1<f64>>> {
        self.check_shape(v.shape())?;
        let values = flat(&values).into_owned();
        let broadcast = v.strides().iter().all(|&s| s == 0);
        let dense = (!broadcast).then(|| flat(&v));
        let w = match &dense {
            Some(d) => Weights::PerPixel(d),
            None => Weights::Uniform(v.as_array().first().copied().unwrap_or(0.0)),
        };
        let g = interruptible(py, || self.p.vjp(&values, w, self.opts()))?.map_err(pyerr)?;
        Ok(PyArray1::from_vec(py, g))
    }

    /// `Σ v · d pixel / d F` at `values` for every structure factor of the
    /// grid, of the shape of `experiment.structure_factors[1]`, computed by the
    /// engine (nearest-neighbour or tricubic, as the experiment looks them up).
    fn sf_vjp<'py>(
        &self,
        py: Python<'py>,
        values: In1<'py, f64>,
        v: In2<'py, f64>,
    ) -> PyResult<Bound<'py, PyArray3<f64>>> {
        self.check_shape(v.shape())?;
        let values = flat(&values).into_owned();
        let v = flat(&v);
        let out = interruptible(py, || self.p.sf_vjp(&values, &v, self.opts()))?.map_err(pyerr)?;
        let g = self.p.plan().grid.as_ref().expect("sf_vjp_of needs a grid");
        let shape = [g.h_range() as usize, g.k_range() as usize, g.l_range() as usize];
        PyArray1::from_vec(py, g.unpadded(&out.gradient)).reshape(shape)
    }

    /// `J·t` at `values`: the derivative of every pixel along the
    /// direction `t` (one number per parameter), of the image's shape.
    fn jvp<'py>(
        &self,
        py: Python<'py>,
        values: In1<'py, f64>,
        t: In1<'py, f64>,
    ) -> PyResult<Bound<'py, PyArray2<f64>>> {
        let (values, t) = (flat(&values).into_owned(), flat(&t).into_owned());
        let d = interruptible(py, || self.p.jvp(&values, &t, self.opts()))?.map_err(pyerr)?;
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
        values: In1<'py, f64>,
        observed: In2<'py, f32>,
        loss: &str,
        skip: Option<In2<'py, bool>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        self.check_shape(observed.shape())?;
        let kind: LossKind = loss.parse().map_err(error)?;
        let values = flat(&values).into_owned();
        let observed = flat(&observed);
        let skip: Option<Vec<bool>> = match skip {
            Some(s) => {
                self.check_shape(s.shape())?;
                Some(flat(&s).into_owned())
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

/// The elements of an array in row-major (C) order, whatever its strides
/// (borrowed where the array is in C order already: a weight image for
/// `vjp` is 8 MB at 1024²). Not numpy's `as_slice`, which also lends a
/// Fortran-ordered array (a transposed view) in its memory order.
fn flat<'a, T: numpy::Element + Copy, D: numpy::ndarray::Dimension>(
    a: &'a numpy::PyReadonlyArray<'_, T, D>,
) -> std::borrow::Cow<'a, [T]> {
    let view = a.as_array();
    match view.to_slice() {
        Some(s) => std::borrow::Cow::Borrowed(s),
        None => std::borrow::Cow::Owned(view.iter().copied().collect()),
    }
}

/// Runs `work` (a render) on a thread of its own with the GIL released,
/// while this thread looks for Ctrl-C every 20 ms: on a KeyboardInterrupt
/// (or another signal handler's exception) the render is asked to stop
/// before its next row ([`interrupt`]), and the exception is raised once it
/// has. (Python runs signal handlers on the main thread only, so the
/// waiting is done here, not by a watcher thread.)
fn interruptible<T: Send>(py: Python<'_>, work: impl FnOnce() -> T + Send) -> PyResult<T> {
    use nanobragg_core::render::interrupt;
    use std::sync::mpsc::{channel, RecvTimeoutError};
    use std::time::Duration;
    std::thread::scope(|scope| {
        let (tx, mut rx) = channel();
        let worker = scope.spawn(move || {
            let _ = tx.send(work());
        });
        loop {
            // (the receiver moves in and out: it may be sent, not shared)
            let (back, got) = py.detach(move || {
                let got = rx.recv_timeout(Duration::from_millis(20));
                (rx, got)
            });
            rx = back;
            match got {
                Ok(out) => return Ok(out),
                Err(RecvTimeoutError::Disconnected) => {
                    // the work panicked: hand the panic on
                    match worker.join() {
                        Err(panic) => std::panic::resume_unwind(panic),
                        Ok(()) => unreachable!("a finished render sent its result"),
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
            }
            if let Err(e) = py.check_signals() {
                interrupt::request();
                let _ = py.detach(move || rx.recv());
                LAST_INTERRUPT_ROWS.store(interrupt::clear(), std::sync::atomic::Ordering::SeqCst);
                return Err(e);
            }
        }
    })
}

/// Rows the last interrupted render left out (for the tests: the render
/// stopped, rather than ran to the end and then raised).
static LAST_INTERRUPT_ROWS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Rows the last render stopped by Ctrl-C left unrendered (0: none was).
#[pyfunction]
fn _interrupted_rows() -> u64 {
    LAST_INTERRUPT_ROWS.load(std::sync::atomic::Ordering::SeqCst)
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

/// The experiment of a nanoBragg command line (one string, split at whitespace,
/// or a list of words), through the command line's own parser.
#[pyfunction]
fn from_args(py: Python<'_>, args: &Bound<'_, PyAny>) -> PyResult<Experiment> {
    let args = words(args)?;
    let inv = nanobragg_pipeline::parse_args(&args).map_err(error)?;
    one_image(&inv)?;
    warn(py, &inv.warnings, &[])?;
    Experiment::from_invocation(py, inv)
}

/// Refuses a command line of several images: an `-expt` list of several
/// experiments, a rotation series (`-images`, an `-expt` scan), `-shard`
/// and `-resume`. An `Experiment` is one image.
pub(crate) fn one_image(inv: &Invocation) -> PyResult<()> {
    if let Some((path, n)) = &inv.expt_shots {
        return Err(error(format!(
            "-expt {}: {n} experiments; an Experiment is one (dials.split_experiments writes them apart, or render the list with the command line)",
            path.display()
        )));
    }
    if inv.series.images > 1 || inv.shard.is_some() || inv.resume {
        return Err(error(format!(
            "a rotation series of {} images (-images, an -expt scan, -shard, -resume): an Experiment is one image (give its phi; the command line renders the series)",
            inv.series.images
        )));
    }
    Ok(())
}

/// The command line's warnings about its input (the command prints them
/// as `warning: ...`), as Python `UserWarning`s: those of `new` not
/// already in `old`.
fn warn(py: Python<'_>, new: &[String], old: &[String]) -> PyResult<()> {
    let warnings = py.import("warnings")?;
    let category = py.get_type::<pyo3::exceptions::PyUserWarning>();
    for w in new.iter().filter(|w| !old.contains(w)) {
        // (level 1: the Python line that called; a Rust function has no frame)
        warnings.call_method1("warn", (w.as_str(), &category, 1))?;
    }
    Ok(())
}

/// The experiment's invocation with a precision, device and thread count.
fn configured(
    mut inv: Invocation,
    dtype: &str,
    device: &str,
    threads: Option<Int<i64>>,
) -> PyResult<Invocation> {
    inv.precision = precision(dtype)?;
    inv.device = match device {
        "cpu" => Device::Cpu,
        "cuda" => Device::Cuda,
        "auto" => Device::Auto,
        other => return Err(error(format!("device {other:?}: use cpu, cuda or auto"))),
    };
    inv.threads = thread_count(threads, inv.threads)?;
    Ok(inv)
}

/// `threads` (the experiment's own when `None`), at most the command line's
/// `-threads` limit.
fn thread_count(threads: Option<Int<i64>>, default: usize) -> PyResult<usize> {
    let threads = threads.map(|t| t.0);
    let max = nanobragg_pipeline::flags::MAX_THREADS as usize;
    // (a Python int of any sign: -1 is refused here, not by the conversion)
    match threads.map_or(Some(default), |t| usize::try_from(t).ok()) {
        Some(t) if t <= max => Ok(t),
        _ => Err(error(format!(
            "threads = {}: must be from 0 to {max} (0: all cores)",
            threads.map_or(default as i64, |t| t)
        ))),
    }
}

/// Refuses structure factors that are not finite real numbers, naming the
/// first bad one (`at`: its Miller index or grid position).
fn check_amplitudes(f: &[f64], at: impl Fn(usize) -> String) -> PyResult<()> {
    match f.iter().position(|v| !v.is_finite()) {
        Some(i) => {
            Err(error(format!("structure factors: F{} = {}: not a finite number", at(i), f[i])))
        }
        None => Ok(()),
    }
}

/// Refuses a complex array where amplitudes are wanted (numpy's cast would
/// drop the imaginary part with only a warning).
fn refuse_complex(py: Python<'_>, obj: &Bound<'_, PyAny>, what: &str) -> PyResult<()> {
    let complex: bool = py.import("numpy")?.getattr("iscomplexobj")?.call1((obj,))?.extract()?;
    match complex {
        true => {
            Err(error(format!("{what}: complex values; give the amplitudes |F| (real numbers)")))
        }
        false => Ok(()),
    }
}

/// The float image (photons per pixel) of `experiment` as a float32 array of
/// shape (slow, fast): the content of the command line's `-floatfile`.
/// `dtype`: "float64" (default), "float32" or "exact" (bit-identical to
/// nanoBragg.c); `device`: "cpu", "cuda" or "auto".
#[pyfunction]
#[pyo3(signature = (experiment, dtype = "float64", device = "cpu", threads = None))]
fn simulate<'py>(
    py: Python<'py>,
    experiment: PyRef<'_, Experiment>,
    dtype: &str,
    device: &str,
    threads: Option<Int<i64>>,
) -> PyResult<Bound<'py, PyArray2<f32>>> {
    let inv = configured(experiment.inv(py), dtype, device, threads)?;
    // (another thread may change the experiment while this one renders its copy)
    drop(experiment);
    let (image, (sp, fp)) = interruptible(py, || -> anyhow::Result<_> {
        let exp = panels::experiment(&inv, &inv.config, inv.seeds().setup, None)?;
        let (image, _) = panels::render(&inv, &exp)?;
        Ok((image, (exp.layout.height, exp.layout.width)))
    })?
    .map_err(|e| error(format!("{e:#}")))?;
    numpy::PyArray1::from_vec(py, image).reshape([sp, fp])
}

/// A structure-factor grid: its first (h, k, l) and its values.
type GridArray<'py> = ((i32, i32, i32), Bound<'py, PyArray3<f64>>);

/// A rendered image with what the command line derives from it: the
/// statistics it prints, the integer image of `-intfile` and the noise image
/// of `-noisefile`.
#[pyclass(frozen, module = "nanobragg._nanobragg")]
struct Image {
    image: Vec<f32>,
    shape: [usize; 2],
    roi: [i64; 4],
    stats: ImageStats,
    int_scale: f64,
    adc_offset: f64,
    noise_idum: i64,
    seconds: f64,
}

#[pymethods]
impl Image {
    /// Photons per pixel, float32 (slow, fast): the `-floatfile` content.
    #[getter]
    fn float<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray2<f32>>> {
        PyArray1::from_slice(py, &self.image).reshape(self.shape)
    }

    /// Seconds the engine took to render (setup and rendering, without the
    /// Python call around it).
    #[getter]
    fn seconds(&self) -> f64 {
        self.seconds
    }

    /// The statistics the command line prints: max_I and its pixel
    /// `max_pixel` as (slow, fast), an index into `.float` as every array
    /// here (the command line prints it (fast, slow)), mean, rms, rmsd, and
    /// the number of pixels they cover.
    #[getter]
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let (s, d) = (&self.stats, PyDict::new(py));
        d.set_item("max_I", s.max_i)?;
        d.set_item("max_pixel", (s.max_s, s.max_f))?;
        d.set_item("mean", s.mean)?;
        d.set_item("rms", s.rms)?;
        d.set_item("rmsd", s.rmsd)?;
        d.set_item("pixels", s.count)?;
        Ok(d)
    }

    /// The `-intfile` pixels, uint16 (slow, fast): `scale` (default the
    /// experiment's `-scale`, else 55000 / max_I as the command line picks it) and
    /// `adc` (default the experiment's `-adc`).
    #[pyo3(signature = (scale = None, adc = None))]
    fn int_image<'py>(
        &self,
        py: Python<'py>,
        scale: Option<f64>,
        adc: Option<f64>,
    ) -> PyResult<Bound<'py, PyArray2<u16>>> {
        let scale = scale.unwrap_or(self.int_scale);
        if !(scale > 0.0 && scale.is_finite()) {
            return Err(error(format!(
                "int_image: scale = {scale}: photons to pixel values is a number > 0 \
                 (None: the experiment's -scale, automatic unless given)"
            )));
        }
        let [sp, fp] = self.shape;
        let adc = adc.unwrap_or(self.adc_offset);
        if !adc.is_finite() {
            return Err(error(format!("int_image: adc = {adc}: not a finite offset")));
        }
        let pixels = nanobragg_io::pgm::int_image(&self.image, fp, sp, self.roi, scale, adc);
        PyArray1::from_vec(py, pixels).reshape(self.shape)
    }

    /// The `-noisefile` pixels, uint16 (slow, fast), Poisson deviates of the
    /// image plus `adc`, with the total photons and the overloads: (pixels,
    /// photons, overloads). `seed` defaults to the experiment's `-seed`
    /// (else the clock, as the command line). `noise_rng`: "parallel" (the
    /// default: Philox per pixel, the command line's `-noise_rng parallel`)
    /// or "c" (nanoBragg.c's draws, the command line's default).
    #[pyo3(signature = (seed = None, adc = None, noise_rng = "parallel"))]
    fn noise_image<'py>(
        &self,
        py: Python<'py>,
        seed: Option<Int<i64>>,
        adc: Option<f64>,
        noise_rng: &str,
    ) -> PyResult<(Bound<'py, PyArray2<u16>>, f64, u64)> {
        use nanobragg_core::noise_stream::{NoiseStream, PixelStream};
        let [sp, fp] = self.shape;
        let idum = seed.map_or(self.noise_idum, |s| -s.0);
        let adc = adc.unwrap_or(self.adc_offset);
        let stream = NoiseStream::parse(noise_rng).ok_or_else(|| {
            error(format!("noise_rng = {noise_rng:?}: use \"parallel\" or \"c\""))
        })?;
        let noise = match stream {
            NoiseStream::C => {
                let mut rng = NoiseRng::new(idum);
                nanobragg_core::noise::noise_image(&self.image, fp, sp, self.roi, adc, &mut rng)
            }
            NoiseStream::Parallel => {
                let at = PixelStream { seed: idum.wrapping_neg(), first_pixel: 0 };
                let (image, roi) = (&self.image, self.roi);
                py.detach(|| {
                    nanobragg_core::noise::noise_image_parallel(image, fp, sp, roi, adc, at, false)
                })
                .0
            }
        };
        let pixels = PyArray1::from_vec(py, noise.pixels).reshape(self.shape)?;
        Ok((pixels, noise.photons, noise.overloads))
    }
}

/// Render `experiment` into an [`Image`] (see `simulate` for the arguments).
#[pyfunction]
#[pyo3(signature = (experiment, dtype = "float64", device = "cpu", threads = None))]
fn render(
    py: Python<'_>,
    experiment: PyRef<'_, Experiment>,
    dtype: &str,
    device: &str,
    threads: Option<Int<i64>>,
) -> PyResult<Image> {
    let inv = configured(experiment.inv(py), dtype, device, threads)?;
    drop(experiment);
    interruptible(py, || -> anyhow::Result<Image> {
        let t0 = Instant::now();
        let seeds = inv.seeds();
        let exp = panels::experiment(&inv, &inv.config, seeds.setup, None)?;
        let (image, _) = panels::render(&inv, &exp)?;
        let seconds = t0.elapsed().as_secs_f64();
        // the whole image of the panels, its pixels between panels masked
        let plan = exp.whole();
        let d = &plan.detector;
        let stats = image_stats(&image, d.fpixels, d.roi, plan.mask.as_deref());
        let o = &inv.outputs;
        let int_scale = match o.int_scale {
            s if s > 0.0 => s,
            _ if stats.max_i > 0.0 => 55000.0 / stats.max_i,
            _ => 1.0,
        };
        Ok(Image {
            image,
            shape: [d.spixels, d.fpixels],
            roi: d.roi,
            stats,
            int_scale,
            adc_offset: o.adc_offset,
            noise_idum: seeds.noise_idum,
            seconds,
        })
    })?
    .map_err(pyerr)
}

/// What `refine` found (see `nanobragg refine`).
#[pyclass(frozen, get_all, module = "nanobragg._nanobragg")]
struct Refined {
    /// The refined parameters' names.
    params: Vec<String>,
    /// Their units.
    units: Vec<String>,
    /// Their values in the starting experiment.
    start: Vec<f64>,
    /// Their refined values.
    values: Vec<f64>,
    /// Their standard errors (None where the information is singular).
    standard_errors: Vec<Option<f64>>,
    /// "sse" or "poisson".
    loss: String,
    /// The loss at the start.
    start_loss: f64,
    /// The loss at the refined values.
    final_loss: f64,
    /// Pixels used.
    pixels: usize,
    /// L-BFGS iterations run.
    iterations: u64,
    /// (iteration, loss, norm of the scaled gradient) for each iteration.
    history: Vec<(u64, f64, Option<f64>)>,
    /// Renders of the loss and its gradient.
    evaluations: usize,
    /// Why it stopped.
    stop: String,
    /// The refined experiment: the start's with the refined values (and
    /// the automatic oversampling of the start, which the fit held).
    experiment: Py<Experiment>,
    /// The start's command line with the refined values.
    command_line: String,
    /// Notes on the command line.
    notes: Vec<String>,
    /// Seconds taken.
    seconds: f64,
    /// Strong spots found on the observed image.
    spots: usize,
    /// The share of them the refined experiment explains.
    explained: f64,
    /// Rms distance of the indexed spots from their predicted centroids (pixels).
    rms_px: f64,
    /// Pearson χ² per pixel where the experiment expects ≥ 1 photon (Poisson loss).
    chi2_per_pixel: Option<f64>,
    /// Why the fit counts as failed (None: it passed the check).
    failed: Option<String>,
}

#[pymethods]
impl Refined {
    /// Whether the fit passed the goodness-of-fit check.
    #[getter]
    fn success(&self) -> bool {
        self.failed.is_none()
    }

    fn __repr__(&self) -> String {
        let rows: Vec<String> = (0..self.params.len())
            .map(|i| {
                let se = self.standard_errors[i].map_or("singular".into(), |s| format!("{s:.3e}"));
                format!("  {} = {:.8} ± {se} {}", self.params[i], self.values[i], self.units[i])
            })
            .collect();
        let check = match &self.failed {
            Some(why) => format!("FAILED: {why}"),
            None => format!("{:.0} % of {} spots explained", 100.0 * self.explained, self.spots),
        };
        format!(
            "nanobragg.Refined({}, {check}, {} loss {:.6e} -> {:.6e}, {} iterations:\n{})",
            self.stop,
            self.loss,
            self.start_loss,
            self.final_loss,
            self.iterations,
            rows.join("\n")
        )
    }
}

/// Fit `params` (`-gradient` names) of `experiment` to `observed` (an image of
/// the experiment's shape, photons) by L-BFGS on the engine's loss gradient, as
/// `nanobragg refine` does (`NAME@K`: panel `K`'s parameter of a
/// multi-panel detector, `NAME@*` every panel's). `loss`: "sse" or
/// "poisson" (default: poisson for whole counts, else sse); `skip`: pixels
/// to leave out; `verbose` prints what the fit does and each iteration
/// (with Python's `print`); `min_explained` and
/// `max_chi2` as the command's flags (the fit check).
#[pyfunction]
#[pyo3(signature = (experiment, observed, params, loss = None, maxiter = Int(100), gtol = None,
                    history = Int(8), skip = None, threads = None, verbose = false,
                    prefit = true, min_explained = 0.8, max_chi2 = 4.0),
       text_signature = "(experiment, observed, params, loss=None, maxiter=100, gtol=None, \
                         history=8, skip=None, threads=None, verbose=False, prefit=True, \
                         min_explained=0.8, max_chi2=4.0)")]
#[allow(clippy::too_many_arguments)]
fn refine(
    py: Python<'_>,
    experiment: PyRef<'_, Experiment>,
    observed: In2<'_, f32>,
    params: Vec<String>,
    loss: Option<&str>,
    maxiter: Int<u64>,
    gtol: Option<f64>,
    history: Int<usize>,
    skip: Option<In2<'_, bool>>,
    threads: Option<Int<i64>>,
    verbose: bool,
    prefit: bool,
    min_explained: f64,
    max_chi2: f64,
) -> PyResult<Refined> {
    use nanobragg_pipeline::refine::{refine as fit, Observed, Report, Settings};
    let mut inv = experiment.inv(py);
    inv.threads = thread_count(threads, inv.threads)?;
    let values = flat(&observed).into_owned();
    let skip = skip.map(|s| flat(&s).into_owned());
    let observed = Observed::new(values, skip).map_err(pyerr)?;
    let loss = loss.map(|l| l.parse::<LossKind>()).transpose().map_err(error)?;
    if params.is_empty() {
        return Err(error("refine: name at least one parameter"));
    }
    let (maxiter, history) = (maxiter.0, history.0);
    if gtol.is_some_and(|g| g.is_nan() || g <= 0.0) || history == 0 {
        return Err(error("refine: gtol and history must be > 0"));
    }
    let settings = Settings {
        params: experiment.targets(py, &params)?,
        loss,
        maxiter,
        gtol,
        history,
        prefit,
        min_explained,
        max_chi2,
    };
    let start = experiment.chosen(py, &params)?;
    let mut refined = experiment.deep_copy(py)?;
    drop(experiment);
    // (Python's print, not the process's stdout: a notebook shows the lines)
    // the first error of a print (a KeyboardInterrupt, which Python raises
    // in the next call into it; a closed stream) is raised after the fit, as
    // it would be without the lines
    let failed = std::sync::Arc::new(std::sync::Mutex::new(None::<PyErr>));
    let report = verbose.then(|| -> Report {
        let failed = failed.clone();
        std::sync::Arc::new(move |line: &str| {
            Python::attach(|py| {
                let printed =
                    py.import("builtins").and_then(|b| b.getattr("print")?.call1((line,)));
                if let Err(e) = printed {
                    failed.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(e);
                }
            })
        })
    });
    let fitted = interruptible(py, || fit(&inv, observed, &settings, report))?;
    if let Some(e) = failed.lock().unwrap_or_else(|e| e.into_inner()).take() {
        return Err(e);
    }
    let r = fitted.map_err(pyerr)?;
    // (the fit's own experiment: the automatic oversampling of the start held)
    refined.store(py, start.config(&r.values).map_err(pyerr)?);
    Ok(Refined {
        experiment: Py::new(py, refined)?,
        params: r.params.iter().map(|p| p.to_string()).collect(),
        units: r.params.iter().map(|p| p.unit().to_string()).collect(),
        start: r.start,
        values: r.values,
        standard_errors: r.standard_errors,
        loss: r.loss.name().to_string(),
        start_loss: r.start_loss,
        final_loss: r.final_loss,
        pixels: r.pixels,
        iterations: r.iterations,
        history: r.history.iter().map(|s| (s.iteration, s.loss, s.gradient)).collect(),
        evaluations: r.evaluations,
        stop: r.stop,
        command_line: r.command_line.join(" "),
        notes: r.notes,
        seconds: r.seconds,
        spots: r.check.spots,
        explained: r.check.explained,
        rms_px: r.check.rms_px,
        chi2_per_pixel: r.check.chi2_per_pixel,
        failed: r.check.failed,
    })
}

/// An image and its derivative images, as numpy arrays.
type ImageAndDerivatives<'py> = (Bound<'py, PyArray2<f32>>, Bound<'py, PyArray3<f32>>);

/// The image of `experiment` and its derivatives by `params` (names as for
/// `Params`: `misset_x` is the `-misset` angle, `NAME@K` panel `K`'s,
/// `NAME@*` one per panel): a float32 array (slow, fast) and one of shape
/// (number of parameters, slow, fast), per unit of each flag.
#[pyfunction]
#[pyo3(signature = (experiment, params, dtype = "float64", threads = None))]
fn jacobian<'py>(
    py: Python<'py>,
    experiment: PyRef<'_, Experiment>,
    params: Vec<String>,
    dtype: &str,
    threads: Option<Int<i64>>,
) -> PyResult<ImageAndDerivatives<'py>> {
    let precision = precision(dtype)?;
    let opts = RenderOptions::default().threads(thread_count(threads, experiment.inv(py).threads)?);
    let p = experiment.chosen(py, &params)?;
    drop(experiment);
    let (image, derivatives) =
        interruptible(py, || p.jacobian(p.start(), opts, precision))?.map_err(pyerr)?;
    let [fp, sp] = p.image_size();
    let image = numpy::PyArray1::from_vec(py, image).reshape([sp, fp])?;
    let n = derivatives.len();
    let flat: Vec<f32> = derivatives.into_iter().flatten().collect();
    let derivatives = numpy::PyArray1::from_vec(py, flat).reshape([n, sp, fp])?;
    Ok((image, derivatives))
}

/// Renders one worker's shots of the dataset `spec` (a SPEC.toml path):
/// shard `shard` of `shards` (shots shard, shard + shards, ...; by default
/// a Slurm job array's task, else all shots), or with `resume` those of
/// them no file in the output folder holds; the worker's account as a
/// dict. `nanobragg.dataset.run` distributes the shards.
#[pyfunction]
#[pyo3(signature = (spec, shard = None, shards = None, resume = false, threads = None,
                    device = "cpu", progress = false))]
#[allow(clippy::too_many_arguments)]
fn dataset_worker<'py>(
    py: Python<'py>,
    spec: std::path::PathBuf,
    shard: Option<Int<u64>>,
    shards: Option<Int<u64>>,
    resume: bool,
    threads: Option<Int<i64>>,
    device: &str,
    progress: bool,
) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
    use nanobragg_pipeline::dataset::{team, Dataset, DatasetSpec};
    let w = py
        .detach(|| -> anyhow::Result<_> {
            let spec = DatasetSpec::read(&spec)?;
            let mut extra = vec!["-device".to_string(), device.to_string()];
            if let Some(t) = threads {
                extra.extend(["-threads".to_string(), t.0.to_string()]);
            }
            let set = Dataset::new(spec, &extra)?;
            let shard = match (shard.map(|i| i.0), shards.map(|k| k.0)) {
                (Some(i), Some(k)) => (i, k),
                (None, None) => team::shard_from(None)?,
                _ => anyhow::bail!("dataset: give shard and shards together"),
            };
            let team = team::Team::solo(shard)?;
            nanobragg_pipeline::dataset::run_worker(&set, &team, resume, progress)
        })
        .map_err(pyerr)?;
    let d = pyo3::types::PyDict::new(py);
    d.set_item("worker", w.worker)?;
    d.set_item("todo", w.todo)?;
    d.set_item("shots", &w.shots)?;
    d.set_item("written", &w.written)?;
    d.set_item("lost", w.lost())?;
    d.set_item("photons", w.photons)?;
    d.set_item("seconds", w.seconds)?;
    d.set_item("error", w.failure.map(|e| format!("{e:#}")))?;
    Ok(d)
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

/// Reads frame `frame` (from 0) of an SMV, miniCBF or NXmx image (ours or
/// a detector's: gzip or bitshuffle-LZ4 chunks). Returns `(pixels, header)`:
/// the pixels as stored (ADU, offset included) in a float64 array of
/// (slow, fast), or (panels, slow, fast) for a multi-panel NXmx file; the
/// header a dict of its values as text, with `format`, `frames`,
/// `saturation` and `underload` where the file gives them. The array is
/// what `refine` takes as the observation, once the offset is removed.
#[pyfunction]
#[pyo3(signature = (path, frame = Int(0)), text_signature = "(path, frame=0)")]
fn read_image<'py>(
    py: Python<'py>,
    path: std::path::PathBuf,
    frame: Int<usize>,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyDict>)> {
    let img = py.detach(|| nanobragg_io::read_image::read_image(&path, frame.0)).map_err(error)?;
    let header = PyDict::new(py);
    header.set_item("format", img.format.name())?;
    header.set_item("frames", img.frames)?;
    if let Some(s) = img.saturation {
        header.set_item("saturation", s)?;
    }
    if let Some(u) = img.underload {
        header.set_item("underload", u)?;
    }
    for (k, v) in &img.header {
        header.set_item(k, v)?;
    }
    let flat = PyArray1::from_vec(py, img.pixels);
    let pixels = match img.panels {
        1 => flat.reshape([img.spixels, img.fpixels])?.into_any(),
        p => flat.reshape([p, img.spixels, img.fpixels])?.into_any(),
    };
    Ok((pixels, header))
}

#[pymodule]
fn _nanobragg(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("Error", m.py().get_type::<Error>())?;
    experiment::register(m)?;
    m.add_class::<Params>()?;
    m.add_class::<Image>()?;
    m.add_function(wrap_pyfunction!(render, m)?)?;
    m.add_function(wrap_pyfunction!(read_image, m)?)?;
    m.add_function(wrap_pyfunction!(_interrupted_rows, m)?)?;
    // numpy's C API fetched now: fetched first after a render, a Ctrl-C
    // pending then became a PanicException (rust-numpy's capsule lookup)
    numpy::PyArray1::<f64>::zeros(m.py(), 0, false);
    m.add_class::<Refined>()?;
    m.add_function(wrap_pyfunction!(refine, m)?)?;
    m.add_function(wrap_pyfunction!(from_args, m)?)?;
    m.add_function(wrap_pyfunction!(simulate, m)?)?;
    m.add_function(wrap_pyfunction!(jacobian, m)?)?;
    m.add_function(wrap_pyfunction!(main, m)?)?;
    m.add_function(wrap_pyfunction!(dataset_worker, m)?)?;
    Ok(())
}
