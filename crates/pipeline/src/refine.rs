//! `nanobragg refine`: fit chosen parameters of the model given by the usual
//! flags to an observed image, by L-BFGS (argmin) on the loss gradient of
//! [`nanobragg_core::diff::loss`]. See docs/refine.md.

use crate::parameters::{Parameters, Target, MISSETS};
use crate::spots::{self, CentroidFit, Spot};
use crate::{parse_args, Invocation};
use anyhow::{anyhow, bail, Result};
use argmin::core::observers::{Observe, ObserverMode};
use argmin::core::{CostFunction, Error as ArgminError, Executor, Gradient, IterState, State, KV};
use argmin::solver::linesearch::MoreThuenteLineSearch;
use argmin::solver::quasinewton::LBFGS;
use nanobragg_core::config::{Misset, SfSource};
use nanobragg_core::diff::loss::{self, LossKind};
use nanobragg_core::diff::Param;
use nanobragg_core::error::shown;
use nanobragg_core::render::{Precision, RenderOptions};
use nanobragg_core::setup::SetupSeeds;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

/// The flags only `refine` takes (each with one value).
const REFINE_FLAGS: [(&str, &str); 10] = [
    (
        "-observed",
        "the observed image: SMV (as -noisefile), miniCBF, NXmx (ours or a detector's; gzip or bitshuffle-LZ4 chunks) or raw 4-byte floats (as -floatfile)",
    ),
    ("-observed_frame", "the frame of an NXmx -observed file to fit, from 0 (default 0)"),
    ("-refine", "parameters to refine, comma separated (names as for -gradient)"),
    ("-loss", "sse or poisson (default: poisson for whole counts, else sse)"),
    ("-maxiter", "most L-BFGS iterations (default 100)"),
    (
        "-gtol",
        "stop when the scaled gradient's norm is below this (default 1e-2 for poisson, 1e-6 for sse)",
    ),
    ("-history", "L-BFGS memory (default 8, at most 1000)"),
    ("-prefit", "spots (default: fit spot centroids first) or none"),
    ("-min_explained", "least share of observed spots the fit must explain (default 0.8)"),
    ("-max_chi2", "most Pearson chi2 per pixel of a fit to counts (default 4)"),
];

/// What `refine` was asked, besides the model's flags.
#[derive(Debug)]
struct Request {
    observed: PathBuf,
    /// `-observed_frame`.
    frame: usize,
    /// `-refine`'s list, its names checked (the panels they name are
    /// checked against the model's detector).
    list: String,
    /// `-refine all`: every parameter that applies to the model.
    all: bool,
    loss: Option<LossKind>,
    maxiter: u64,
    gtol: Option<f64>,
    history: usize,
    prefit: bool,
    min_explained: f64,
    max_chi2: f64,
    /// The model's flags as typed (refine's own removed).
    model_args: Vec<String>,
}

fn usage() -> String {
    let mut s = String::from(
        "usage: nanobragg refine -observed FILE -refine NAME[,NAME...] [options] <model flags>\n\n\
         Fits the named parameters of the model given by the usual flags (see nanobragg -h)\n\
         to the observed image. Options:\n",
    );
    for (f, h) in REFINE_FLAGS {
        s.push_str(&format!("  {f:<10} {h}\n"));
    }
    s.push_str("parameters: ");
    s.push_str(&Param::ALL.map(|p| p.name()).join(", "));
    s.push('\n');
    s
}

/// Split refine's own flags from the model's.
fn split_args(args: &[String]) -> Result<Option<Request>> {
    let mut model_args = Vec::new();
    let (mut observed, mut list, mut loss) = (None, None, None);
    let mut frame = 0;
    let d = Settings::new(Vec::new());
    let (mut maxiter, mut gtol, mut history) = (d.maxiter, d.gtol, d.history);
    let (mut prefit, mut min_explained, mut max_chi2) = (d.prefit, d.min_explained, d.max_chi2);
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        if a == "-h" || a == "--help" || a == "-help" {
            print!("{}", usage());
            return Ok(None);
        }
        let Some((name, _)) = REFINE_FLAGS.iter().find(|(f, _)| *f == a) else {
            model_args.push(args[i].clone());
            i += 1;
            continue;
        };
        let value = args.get(i + 1).ok_or_else(|| anyhow!("refine: {name} needs a value"))?.clone();
        let bad = |what: &str| anyhow!("refine: {name}: '{}' is not {what}", shown(&value));
        match *name {
            "-observed" => observed = Some(PathBuf::from(&value)),
            "-observed_frame" => frame = value.parse().map_err(|_| bad("a frame number >= 0"))?,
            "-refine" => list = Some(value.clone()),
            "-loss" => loss = Some(value.parse::<LossKind>().map_err(|_| bad("sse or poisson"))?),
            "-maxiter" => maxiter = value.parse().map_err(|_| bad("a whole number"))?,
            "-gtol" => {
                gtol =
                    Some(value.parse().ok().filter(|g: &f64| *g > 0.0).ok_or_else(|| bad("> 0"))?)
            }
            "-prefit" => {
                prefit = match value.as_str() {
                    "spots" => true,
                    "none" => false,
                    _ => return Err(bad("spots or none")),
                }
            }
            "-max_chi2" => {
                max_chi2 = value
                    .parse()
                    .ok()
                    .filter(|g: &f64| *g >= 1.0)
                    .ok_or_else(|| bad("a number >= 1"))?
            }
            "-min_explained" => {
                min_explained = value
                    .parse()
                    .ok()
                    .filter(|g: &f64| (0.0..=1.0).contains(g))
                    .ok_or_else(|| bad("from 0 to 1"))?
            }
            _ => {
                history = value
                    .parse()
                    .ok()
                    .filter(|m: &usize| (1..=MAX_HISTORY).contains(m))
                    .ok_or_else(|| bad(&format!("from 1 to {MAX_HISTORY}")))?
            }
        }
        i += 2;
    }
    let observed = observed.ok_or_else(|| anyhow!("refine: -observed FILE is required"))?;
    let list = list.ok_or_else(|| anyhow!("refine: -refine NAME[,NAME...] is required"))?;
    // the names alone (a panel's, NAME@K, checked with the model)
    let names: Vec<&str> = list.split(',').map(|n| n.split('@').next().unwrap_or(n)).collect();
    Param::parse_list(&names.join(","))
        .map_err(|e| anyhow!("refine: -refine: {}", crate::parameters::message(&e)))?;
    let all = crate::gradient::is_all(&list);
    Ok(Some(Request {
        observed,
        frame,
        list,
        all,
        loss,
        maxiter,
        gtol,
        history,
        prefit,
        min_explained,
        max_chi2,
        model_args,
    }))
}

/// Read frame `frame` of `-observed`: an SMV (`.img`, `.smv`, or a `{`
/// header), miniCBF or NXmx image in ADU, less the `-adc` offset and
/// divided by `-gain`, saturated and underloaded pixels skipped; otherwise
/// raw 4-byte floats.
fn read_observed(
    path: &Path,
    frame: usize,
    inv: &Invocation,
    model: &Parameters,
) -> Result<Observed> {
    let [fp, sp] = model.image_size();
    let n = fp * sp;
    let shown = path.display();
    let fail = |e: &dyn std::fmt::Display| anyhow!("refine: -observed {shown}: {e}");
    // (a FIFO would block, /dev/zero never end)
    let meta = std::fs::metadata(path).map_err(|e| fail(&e))?;
    if !meta.is_file() {
        bail!("refine: -observed {shown}: not a regular file");
    }
    let bytes = std::fs::read(path).map_err(|e| fail(&e))?;
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_lowercase();
    use nanobragg_io::read_image::{read_image, ImageFormat};
    let format = match ext.as_str() {
        "img" | "smv" => Some(ImageFormat::Smv),
        _ if bytes.first() == Some(&b'{') => Some(ImageFormat::Smv),
        _ => ImageFormat::sniff(&bytes),
    };
    let Some(format) = format else {
        if frame != 0 {
            bail!("refine: -observed_frame {frame}: a raw float image holds one frame");
        }
        return float_observed(&bytes, path, [fp, sp]);
    };
    if format == ImageFormat::Smv && frame != 0 {
        bail!("refine: -observed_frame {frame}: an SMV image holds one frame");
    }
    let img = match format {
        // SMV's own reader, whose messages say what is wrong with the header
        ImageFormat::Smv => {
            let smv = nanobragg_io::smv::SmvImage::parse(&bytes, path).map_err(|e| fail(&e))?;
            nanobragg_io::read_image::ImageFile {
                format,
                fpixels: smv.width,
                spixels: smv.height,
                panels: 1,
                frames: 1,
                pixels: smv.data.iter().map(|&v| f64::from(v)).collect(),
                saturation: Some(f64::from(u16::MAX)),
                underload: None,
                header: Vec::new(),
            }
        }
        // (the bytes read above, not the file again)
        ImageFormat::Cbf if frame == 0 => nanobragg_io::read_image::parse_cbf(&bytes, path)
            .map_err(|e| anyhow!("refine: -observed: {e}"))?,
        _ => read_image(path, frame).map_err(|e| anyhow!("refine: -observed: {e}"))?,
    };
    for w in geometry_mismatches(&img.geometry(), model.plan()) {
        eprintln!("warning: -observed {shown}: {w}");
    }
    // each of the model's panels where its image has them
    let layout = model.layout();
    let sizes = &layout.sizes;
    // one image of the whole detector (its panels where the layout puts
    // them), or a multi-panel NXmx frame of one slab per panel
    let fits = match img.panels {
        1 => [img.fpixels, img.spixels] == [fp, sp],
        k => k == sizes.len() && sizes.iter().all(|&[f, s]| f <= img.fpixels && s <= img.spixels),
    };
    if !fits {
        let file = match img.panels {
            1 => format!("{} x {} pixels", img.fpixels, img.spixels),
            k => format!("{k} panels of {} x {} pixels", img.fpixels, img.spixels),
        };
        let detector = match sizes.as_slice() {
            [[f, s]] => format!("{f} x {s}"),
            _ => format!("of {} panels ({fp} x {sp} in all)", sizes.len()),
        };
        bail!("refine: -observed {shown}: the image is {file} but the detector is {detector}");
    }
    // photons: ADU = gain · photons + offset, as the noise image writes them
    let adc = inv.outputs.adc_offset;
    let gain = inv.outputs.response.gain.unwrap_or(1.0);
    let bad =
        |v: f64| img.saturation.is_some_and(|s| v >= s) || img.underload.is_some_and(|u| v <= u);
    let slot = img.fpixels * img.spixels;
    let panel = |k: usize, [f, s]: [usize; 2]| -> Vec<f64> {
        let block = &img.pixels[k * slot..(k + 1) * slot];
        (0..s)
            .flat_map(|row| block[row * img.fpixels..row * img.fpixels + f].iter().copied())
            .collect()
    };
    let (raw, skip) = match Some(layout).filter(|_| img.panels > 1) {
        None => (img.pixels.clone(), img.pixels.iter().map(|&v| bad(v)).collect::<Vec<bool>>()),
        Some(layout) => {
            // a gap between panels is no pixel: skipped
            let (mut raw, mut skip) = (vec![0.0; n], vec![true; n]);
            for (k, &size) in sizes.iter().enumerate() {
                let values = panel(k, size);
                let flags: Vec<bool> = values.iter().map(|&v| bad(v)).collect();
                layout.put(k, &values, &mut raw);
                layout.put(k, &flags, &mut skip);
            }
            (raw, skip)
        }
    };
    let values: Vec<f32> = raw.iter().map(|&v| ((v - adc) / gain) as f32).collect();
    if values.iter().any(|v| !v.is_finite()) {
        bail!("refine: -observed {shown}: the image holds a non-finite value");
    }
    let g = nanobragg_io::cfmt::g;
    let of_frame = match img.frames {
        1 => String::new(),
        k => format!(" frame {frame} of {k}"),
    };
    // counts (a Poisson loss by default) unless the offset took some below 0
    let counts = values.iter().zip(&skip).all(|(&v, &s)| s || v >= 0.0);
    Ok(Observed {
        values,
        skip,
        counts,
        what: match gain {
            1.0 => format!("{}{of_frame}, {} ADU offset removed", format.name(), g(adc)),
            _ => format!(
                "{}{of_frame}, {} ADU offset removed, {} ADU per photon",
                format.name(),
                g(adc),
                g(gain)
            ),
        },
    })
}

/// Each value of an image header's geometry that differs from the model's
/// (the fit starts from the model's, whatever the file says): the distance
/// and beam centre as the NXmx and miniCBF writers give them, the
/// wavelength and the pixel size.
fn geometry_mismatches(
    file: &nanobragg_io::read_image::HeaderGeometry,
    plan: &nanobragg_core::setup::Plan,
) -> Vec<String> {
    let g = nanobragg_io::cfmt::g;
    let d = &plan.detector;
    let spot = crate::image_headers::beam_spot(d);
    let differs = |a: f64, b: f64, rel: f64| (a - b).abs() > rel * a.abs().max(b.abs());
    let mut out = Vec::new();
    let mut say = |what: &str, file: String, model: String| {
        out.push(format!(
            "the file's {what} is {file}, the model's {model} (the fit starts from the model's)"
        ));
    };
    if let Some(x) = file.distance_m.filter(|&x| differs(x, spot.distance_m, 1e-6)) {
        say("distance", format!("{} mm", g(x * 1e3)), format!("{} mm", g(spot.distance_m * 1e3)));
    }
    if let Some([f, s]) = file.beam_centre_px {
        let [mf, ms] = spot.centre_px;
        if (f - mf).abs() > 0.01 || (s - ms).abs() > 0.01 {
            say(
                "beam centre",
                format!("({}, {}) pixels", g(f), g(s)),
                format!("({}, {})", g(mf), g(ms)),
            );
        }
    }
    let lambda_a = plan.sources.central_lambda_m * 1e10;
    if let Some(x) = file.wavelength_a.filter(|&x| differs(x, lambda_a, 1e-6)) {
        say("wavelength", format!("{} Å", g(x)), format!("{} Å", g(lambda_a)));
    }
    if let Some(x) = file.pixel_size_m.filter(|&x| differs(x, d.pixel_size_m, 1e-6)) {
        say("pixel size", format!("{} mm", g(x * 1e3)), format!("{} mm", g(d.pixel_size_m * 1e3)));
    }
    out
}

/// An observed image of raw 4-byte floats, `fp` x `sp`.
fn float_observed(bytes: &[u8], path: &Path, [fp, sp]: [usize; 2]) -> Result<Observed> {
    let (n, shown) = (fp * sp, path.display());
    if bytes.len() != 4 * n {
        bail!(
            "refine: -observed {shown}: {} bytes is not a {fp} x {sp} image of 4-byte floats ({} bytes)",
            bytes.len(),
            4 * n
        );
    }
    let values: Vec<f32> =
        bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    if values.iter().any(|v| !v.is_finite()) {
        bail!("refine: -observed {shown}: the image holds a non-finite value");
    }
    let counts = values.iter().all(|&v| v >= 0.0 && v.fract() == 0.0);
    Ok(Observed { skip: vec![false; n], values, counts, what: "4-byte floats".into() })
}

/// Loss, gradient, Gauss–Newton Hessian and covariance by the refined
/// parameters at `values`.
fn evaluate(model: &Parameters, values: &[f64], job: &Job) -> Result<Eval> {
    let o = &job.observed;
    let ev = model.loss(values, job.kind, &o.values, Some(&o.skip), job.opts)?;
    Ok(Eval {
        value: ev.value,
        covariance: ev.covariance(),
        gradient: ev.gradient,
        hessian: ev.hessian,
        pixels: ev.pixels,
        sigma2: ev.sigma2,
    })
}

/// What one evaluation returns, by the refined parameters.
#[derive(Debug, Clone)]
struct Eval {
    value: f64,
    gradient: Vec<f64>,
    hessian: Vec<f64>,
    covariance: Option<Vec<f64>>,
    pixels: usize,
    sigma2: f64,
}

/// The fixed inputs of the loss.
struct Job {
    kind: LossKind,
    observed: Observed,
    opts: RenderOptions,
}

/// The problem argmin sees: `values = start + T x`, the loss as is. `T`
/// whitens the Gauss–Newton Hessian at the start (`Tᵀ H T = 1`): one unit of
/// x is one "typical step" of the loss in every direction, whatever the
/// parameters' units and however correlated they are.
/// One render gives both the loss and its gradient: the last point is kept,
/// and so is the best one seen (the answer if the line search gives up).
struct Problem<'a> {
    model: &'a Parameters,
    /// The values at x = 0.
    origin: &'a [f64],
    job: &'a Job,
    /// `T`, row-major `params × params`.
    map: Vec<f64>,
    last: Mutex<Option<(Vec<f64>, Eval)>>,
    best: &'a Mutex<Option<(Vec<f64>, Eval)>>,
    evaluations: &'a Mutex<usize>,
    /// The iterations so far (to say where a loss stopped being finite).
    iterations: std::sync::Arc<Mutex<Vec<Step>>>,
    /// The first evaluation whose loss or gradient was not finite, described.
    non_finite: &'a Mutex<Option<String>>,
}

impl Problem<'_> {
    fn values(&self, x: &[f64]) -> Vec<f64> {
        values_at(self.origin, &self.map, x)
    }

    fn eval(&self, x: &[f64]) -> std::result::Result<Eval, ArgminError> {
        if x.iter().any(|v| !v.is_finite()) {
            return Err(ArgminError::msg("the line search proposed a non-finite step"));
        }
        if let Some((px, e)) = self.last.lock().unwrap().as_ref() {
            if px == x {
                return Ok(e.clone());
            }
        }
        let values = self.values(x);
        let e =
            evaluate(self.model, &values, self.job).map_err(|e| ArgminError::msg(e.to_string()))?;
        *self.evaluations.lock().unwrap() += 1;
        *self.last.lock().unwrap() = Some((x.to_vec(), e.clone()));
        if let Some(why) = not_finite(&e) {
            let mut first = self.non_finite.lock().unwrap();
            if first.is_none() {
                // the observer has recorded iterations 0..n: this is iteration n's search
                let n = self.iterations.lock().unwrap().len();
                *first = Some(format!(
                    "the loss is not finite at iteration {n} ({why}) with {}",
                    at_values(&self.model.params, &values)
                ));
            }
        }
        let mut best = self.best.lock().unwrap();
        if e.value.is_finite() && best.as_ref().is_none_or(|(_, b)| e.value < b.value) {
            *best = Some((x.to_vec(), e.clone()));
        }
        Ok(e)
    }
}

impl CostFunction for Problem<'_> {
    type Param = Vec<f64>;
    type Output = f64;
    fn cost(&self, x: &Vec<f64>) -> std::result::Result<f64, ArgminError> {
        Ok(self.eval(x)?.value)
    }
}

impl Gradient for Problem<'_> {
    type Param = Vec<f64>;
    type Gradient = Vec<f64>;
    fn gradient(&self, x: &Vec<f64>) -> std::result::Result<Vec<f64>, ArgminError> {
        let e = self.eval(x)?;
        let n = e.gradient.len();
        // d/dx = Tᵀ d/d values
        Ok((0..n).map(|j| (0..n).map(|i| self.map[i * n + j] * e.gradient[i]).sum()).collect())
    }
}

type St = IterState<Vec<f64>, Vec<f64>, (), (), (), f64>;

/// Where [`refine`] says what it does (what it fits, the prefit, each
/// iteration), one line per call: the command line prints the lines, Python
/// hands them to its own `print` (a notebook shows them); `None` keeps the
/// fit quiet.
pub type Report = std::sync::Arc<dyn Fn(&str) + Send + Sync>;

/// `line()` to `report`, formatted only where there is one.
fn say(report: &Option<Report>, line: impl FnOnce() -> String) {
    if let Some(r) = report {
        r(&line());
    }
}

/// One entry per iteration: iteration, loss, norm of the scaled gradient;
/// reported as it comes.
struct Progress {
    report: Option<Report>,
    history: std::sync::Arc<Mutex<Vec<Step>>>,
}

/// One L-BFGS iteration.
#[derive(Debug, Clone, Copy)]
pub struct Step {
    /// Iteration number (0 the start).
    pub iteration: u64,
    /// The loss.
    pub loss: f64,
    /// Norm of the gradient by the whitened parameters (see `docs/refine.md`).
    pub gradient: Option<f64>,
}

impl Observe<St> for Progress {
    fn observe_iter(&mut self, state: &St, _kv: &KV) -> std::result::Result<(), ArgminError> {
        let g = state.get_gradient().map(|g| g.iter().map(|x| x * x).sum::<f64>().sqrt());
        let step = Step { iteration: state.get_iter(), loss: state.get_cost(), gradient: g };
        say(&self.report, || {
            format!(
                "iteration {:>4}  loss {:<22}  |gradient| {}",
                step.iteration,
                format!("{:.12e}", step.loss),
                g.map(|g| format!("{g:.3e}")).unwrap_or_else(|| "-".into())
            )
        });
        self.history.lock().unwrap().push(step);
        Ok(())
    }
}

/// Most L-BFGS memory (`-history`): each step keeps two vectors of the
/// parameters, and more than a few tens never helps.
pub const MAX_HISTORY: usize = 1000;

/// What to refine and how (the command line's `-refine`, `-loss`,
/// `-maxiter`, `-gtol`, `-history`).
#[derive(Debug, Clone)]
pub struct Settings {
    /// The parameters to refine.
    pub params: Vec<Target>,
    /// The loss (default: Poisson for whole counts, else SSE).
    pub loss: Option<LossKind>,
    /// Most L-BFGS iterations.
    pub maxiter: u64,
    /// Stop when the scaled gradient's norm is below this (default: by the
    /// loss, [`default_gtol`]).
    pub gtol: Option<f64>,
    /// L-BFGS memory.
    pub history: usize,
    /// Fit the spot centroids before the pixels ([`crate::spots`]).
    pub prefit: bool,
    /// The least share of the observed spots the refined model must
    /// explain for the fit to count as a success.
    pub min_explained: f64,
    /// The most Pearson χ² per pixel (Poisson loss) of a fit that counts as
    /// a success.
    pub max_chi2: f64,
}

/// The default of [`Settings::gtol`] for a loss. The gradient is taken in
/// whitened units (one unit is one step of the Gauss–Newton curvature):
/// for the Poisson loss that is about one standard error, so 1e-2 is far
/// inside it, while below about 2e-3 the gradient is the image's rounding
/// and L-BFGS only spends renders; for SSE (noiseless images) the unit is
/// set by the rounding itself.
pub fn default_gtol(kind: LossKind) -> f64 {
    match kind {
        LossKind::Poisson => 1e-2,
        LossKind::Sse => 1e-6,
    }
}

/// Default of [`Settings::max_chi2`]: Poisson counts of a right model give
/// 1, read-out noise and gain somewhat more; a model that misses the spots
/// tens or hundreds, even where it explains most of them.
pub const DEFAULT_MAX_CHI2: f64 = 4.0;

/// Default of [`Settings::min_explained`].
pub const DEFAULT_MIN_EXPLAINED: f64 = 0.8;

impl Settings {
    /// Settings with the command line's defaults for `params`.
    pub fn new(params: Vec<Target>) -> Self {
        Settings {
            params,
            loss: None,
            maxiter: 100,
            gtol: None,
            history: 8,
            prefit: true,
            min_explained: DEFAULT_MIN_EXPLAINED,
            max_chi2: DEFAULT_MAX_CHI2,
        }
    }
}

/// An observed image for [`refine`]: photons per pixel (fast index fastest)
/// and the pixels to leave out.
#[derive(Debug, Clone)]
pub struct Observed {
    values: Vec<f32>,
    skip: Vec<bool>,
    /// Whole counts (SMV, or a float file of whole numbers ≥ 0).
    counts: bool,
    what: String,
}

impl Observed {
    /// Pixel values (photons), optionally with pixels to skip (true =
    /// skip); whole numbers ≥ 0 are counts (Poisson loss by default).
    pub fn new(values: Vec<f32>, skip: Option<Vec<bool>>) -> Result<Self> {
        if values.iter().any(|v| !v.is_finite()) {
            bail!("refine: the observed image holds a non-finite value");
        }
        let counts = values.iter().all(|&v| v >= 0.0 && v.fract() == 0.0);
        let skip = skip.unwrap_or_else(|| vec![false; values.len()]);
        if skip.len() != values.len() {
            bail!("refine: {} skip flags for {} pixels", skip.len(), values.len());
        }
        Ok(Observed { values, skip, counts, what: "an array".into() })
    }
}

/// What [`refine`] found.
#[derive(Debug, Clone)]
pub struct Refined {
    /// The refined parameters.
    pub params: Vec<Target>,
    /// Their values in the starting model.
    pub start: Vec<f64>,
    /// Their refined values.
    pub values: Vec<f64>,
    /// Their standard errors (`None` where the information is singular);
    /// for the Poisson loss scaled by √(χ²/pixel) of [`FitCheck`] where that
    /// exceeds 1.
    pub standard_errors: Vec<Option<f64>>,
    /// The loss used.
    pub loss: LossKind,
    /// The loss where the pixel fit started (after the centroid prefit).
    pub start_loss: f64,
    /// The loss at the refined values.
    pub final_loss: f64,
    /// Pixels used.
    pub pixels: usize,
    /// SSE: the residual variance (standard errors are scaled by it).
    pub sigma2: f64,
    /// L-BFGS iterations run.
    pub iterations: u64,
    /// The loss at each iteration.
    pub history: Vec<Step>,
    /// Renders (one each for the loss and its gradient).
    pub evaluations: usize,
    /// Why it stopped.
    pub stop: String,
    /// The starting command line with the refined values.
    pub command_line: Vec<String>,
    /// Notes on the command line (values a flag cannot hold as refined).
    pub notes: Vec<String>,
    /// Seconds taken.
    pub seconds: f64,
    /// The centroid prefit, when it ran.
    pub prefit: Option<CentroidFit>,
    /// The goodness-of-fit check of the refined model.
    pub check: FitCheck,
}

/// Whether a refined model explains the observed image: the share of the
/// observed spots it explains ([`spots::explained_fraction`]), the rms
/// distance of their centroids from the predicted positions, and the
/// Pearson χ² per pixel (1 for Poisson counts of a right model) over the
/// pixels where the model expects at least one photon.
#[derive(Debug, Clone)]
pub struct FitCheck {
    /// Strong spots found on the observed image.
    pub spots: usize,
    /// The share of them the model explains.
    pub explained: f64,
    /// Of them, those indexed by the model (hkl within 0.25 of whole).
    pub indexed: usize,
    /// Rms centroid residual of the indexed spots (pixels).
    pub rms_px: f64,
    /// Σ (k − μ)²/μ / n over the n pixels with μ ≥ 1 (Poisson loss only).
    pub chi2_per_pixel: Option<f64>,
    /// Why the fit counts as failed, if it does.
    pub failed: Option<String>,
}

/// Fewest spots for the centroid prefit and the spot check.
const MIN_SPOTS: usize = 6;

/// Fit `settings.params` of the model `inv`
/// to `observed` by L-BFGS on the loss gradient, saying what it does to
/// `report`.
pub fn refine(
    inv: &Invocation,
    observed: Observed,
    settings: &Settings,
    report: Option<Report>,
) -> Result<Refined> {
    fit(inv, observed, settings, report, false)
}

/// [`refine`]; with `drop_flat` (`-refine all`) the parameters that do not
/// change the pixels used are left out, with a note, instead of refused.
fn fit(
    inv: &Invocation,
    observed: Observed,
    settings: &Settings,
    report: Option<Report>,
    drop_flat: bool,
) -> Result<Refined> {
    let (model, observed) = start(inv, observed, settings)?;
    let kind =
        settings.loss.unwrap_or(if observed.counts { LossKind::Poisson } else { LossKind::Sse });
    let used = model.pixels_used(&observed.skip)?;
    loss::check_observed(kind, &observed.values, &used).map_err(|e| anyhow!("refine: {e}"))?;
    let job = Job { kind, observed, opts: RenderOptions::default().threads(inv.threads) };
    say(&report, || {
        format!(
            "refining {} against {}, {} loss",
            settings.params.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", "),
            job.observed.what,
            kind
        )
    });
    let t0 = Instant::now();
    let spots = spots::find_panel_spots(&model, &job.observed.values, &job.observed.skip);
    let still = model.plan0.phisteps <= 1 && model.plan0.osc_rad == 0.0;
    let moving = settings.params.iter().any(|t| spots::moves_spots(t.param));
    let prefit = if settings.prefit && still && moving && spots.len() >= MIN_SPOTS {
        // candidates of the prefit are judged by the pixel loss alone (one
        // plain render each)
        let used = model.pixels_used(&job.observed.skip)?;
        let judge = |v: &[f64]| -> Result<f64> {
            let image = model.image(v, job.opts, Precision::Fast64)?;
            Ok(loss::loss_value(kind, &image, &job.observed.values, &used))
        };
        let t = Instant::now();
        let fit = spots::fit_centroids(&model, &model.start, &spots, judge)?;
        say(&report, || {
            format!(
                "prefit: {} spots, {} indexed, rms {:.3} px from the predicted centroids \
                 (best of {} starting points, {:.1} s)",
                fit.spots,
                fit.indexed,
                fit.rms_px,
                fit.starts,
                t.elapsed().as_secs_f64()
            )
        });
        Some(fit)
    } else {
        None
    };
    // the prefit's values only where the pixel loss agrees they are better
    let mut origin = model.start.clone();
    let mut first = evaluate(&model, &origin, &job)?;
    let mut prefit = prefit;
    if let Some(fit) = &mut prefit {
        let at_fit = evaluate(&model, &fit.values, &job)?;
        fit.kept = at_fit.value < first.value && not_finite(&at_fit).is_none();
        say(&report, || {
            format!(
                "prefit {}: loss {:.12e} at its values, {:.12e} at the start",
                if fit.kept { "kept" } else { "not kept" },
                at_fit.value,
                first.value
            )
        });
        if fit.kept {
            origin = fit.values.clone();
            first = at_fit;
        }
    }
    if let Some(why) = not_finite(&first) {
        bail!(
            "refine: the loss is not finite at the start ({why}) with {}; the model or the observed image overflows",
            at_values(&settings.params, &origin)
        );
    }
    let np = settings.params.len();
    let flat =
        |i: usize| !(first.hessian[i * np + i] > 0.0 && first.hessian[i * np + i].is_finite());
    if drop_flat && (0..np).any(flat) && !(0..np).all(flat) {
        let (keep, skip): (Vec<usize>, Vec<usize>) = (0..np).partition(|&i| !flat(i));
        let names: Vec<String> = skip.iter().map(|&i| settings.params[i].to_string()).collect();
        say(&report, || {
            format!(
                "note: -refine all: skipped {}: no curvature (does not change the pixels used)",
                names.join(", ")
            )
        });
        let settings = Settings {
            params: keep.iter().map(|&i| settings.params[i]).collect(),
            ..settings.clone()
        };
        return fit(inv, job.observed, &settings, report, false);
    }
    for (i, p) in settings.params.iter().enumerate() {
        if flat(i) {
            bail!("refine: {p} does not change the pixels used (no curvature); leave it out");
        }
    }
    let map = whitening(&first.hessian, settings.params.len());
    say(&report, || format!("{} pixels used; start loss {:.12e}", first.pixels, first.value));
    let (best, evaluations) = (Mutex::new(None), Mutex::new(0));
    let history = std::sync::Arc::new(Mutex::new(Vec::new()));
    let non_finite = Mutex::new(None);
    let problem = Problem {
        model: &model,
        origin: &origin,
        job: &job,
        map: map.clone(),
        last: Mutex::new(None),
        best: &best,
        evaluations: &evaluations,
        iterations: history.clone(),
        non_finite: &non_finite,
    };
    let linesearch = MoreThuenteLineSearch::new();
    let solver = LBFGS::new(linesearch, settings.history)
        .with_tolerance_grad(settings.gtol.unwrap_or_else(|| default_gtol(kind)))?
        .with_tolerance_cost(0.0)?;
    let x0 = vec![0.0; settings.params.len()];
    let progress = Progress { report, history: history.clone() };
    let run = Executor::new(problem, solver)
        .configure(|s| s.param(x0).max_iters(settings.maxiter))
        .add_observer(progress, ObserverMode::Always)
        .run();
    let (iterations, stop) = match &run {
        Ok(r) => {
            (r.state().get_iter(), r.state().get_termination_reason().map(|t| t.text().to_string()))
        }
        Err(e) => (0, Some(format!("stopped: {e}"))),
    };
    // a probe the line search recovered from is no failure; one that ended the run is
    if run.is_err() {
        if let Some(what) = non_finite.lock().unwrap().take() {
            bail!("refine: {what}");
        }
    }
    let (bx, _) = best.lock().unwrap().clone().expect("the start was evaluated");
    let values =
        nearest_misset_branch(&settings.params, &model.start, values_at(&origin, &map, &bx));
    let fin = evaluate(&model, &values, &job)?;
    if let Some(why) = not_finite(&fin) {
        bail!(
            "refine: the loss is not finite at the refined values ({why}) with {}",
            at_values(&settings.params, &values)
        );
    }
    let np = settings.params.len();
    let check = check_fit(&model, &values, &job, &spots, settings)?;
    // quasi-Poisson: counts that scatter more than Poisson (or a model that
    // misses something) widen the errors by the square root of the excess
    let dispersion = check.chi2_per_pixel.filter(|x| x.is_finite()).unwrap_or(1.0).max(1.0);
    let standard_errors: Vec<Option<f64>> = match &fin.covariance {
        Some(c) => (0..np).map(|i| Some((dispersion * c[i * np + i].max(0.0)).sqrt())).collect(),
        None => vec![None; np],
    };
    let (command_line, notes) = refined_command_line(inv, &model, &values, &standard_errors);
    let history = history.lock().unwrap().clone();
    let evaluations = *evaluations.lock().unwrap() + 1;
    Ok(Refined {
        params: settings.params.clone(),
        start: model.start.clone(),
        values,
        standard_errors,
        loss: kind,
        start_loss: first.value,
        final_loss: fin.value,
        pixels: fin.pixels,
        sigma2: fin.sigma2,
        iterations,
        history,
        evaluations,
        stop: stop.unwrap_or_else(|| "finished".into()),
        command_line,
        notes,
        seconds: t0.elapsed().as_secs_f64(),
        prefit,
        check,
    })
}

/// `values` with the refined misset angles as the triple nearest `start`
/// among those of the same rotation: (x, y, z) and (x + 180°, 180° − y,
/// z + 180°) turn the crystal alike (Rz·Ry·Rx), as do angles a whole turn
/// apart. Near y = ±90° a fit can end on either branch; reporting the one by
/// the start keeps the values (and their errors, which the map leaves as
/// they are) comparable with it. The angles change only where another triple
/// is nearer: a fit that ends by the start keeps its values bit for bit.
fn nearest_misset_branch(params: &[Target], start: &[f64], mut values: Vec<f64>) -> Vec<f64> {
    let at = MISSETS.map(|m| params.iter().position(|t| t.param == m));
    // (one angle alone cannot move to the other branch)
    let [Some(ix), Some(iy), Some(iz)] = at else { return values };
    let s = [start[ix], start[iy], start[iz]];
    let a = [values[ix], values[iy], values[iz]];
    let b = [a[0] + 180.0, 180.0 - a[1], a[2] + 180.0];
    // each angle the turn nearest its start
    let near = |t: [f64; 3]| {
        let mut t = t;
        for (v, s) in t.iter_mut().zip(s) {
            if (*v - s).abs() > 180.0 {
                *v -= 360.0 * ((*v - s) / 360.0).round();
            }
        }
        t
    };
    let dist = |t: &[f64; 3]| t.iter().zip(s).map(|(v, s)| (v - s).powi(2)).sum::<f64>();
    let (a2, b2) = (near(a), near(b));
    let best = if dist(&b2) < dist(&a2) { b2 } else { a2 };
    for (i, v) in [ix, iy, iz].into_iter().zip(best) {
        values[i] = v;
    }
    values
}

/// The goodness-of-fit check of the model at `values` ([`FitCheck`]).
fn check_fit(
    model: &Parameters,
    values: &[f64],
    job: &Job,
    spots: &[Spot],
    settings: &Settings,
) -> Result<FitCheck> {
    let min_explained = settings.min_explained;
    let image = model.image(values, job.opts, Precision::Exact64)?;
    let explained = spots::explained_fraction(model, spots, &job.observed.values, &image);
    let (indexed, rms_px) = spots::centroid_rms(model, values, spots)?;
    let chi2_per_pixel = (job.kind == LossKind::Poisson).then(|| {
        let (mut sum, mut n) = (0.0, 0usize);
        for ((&mu, &k), &skip) in image.iter().zip(&job.observed.values).zip(&job.observed.skip) {
            if !skip && mu >= 1.0 {
                sum += (k as f64 - mu).powi(2) / mu;
                n += 1;
            }
        }
        if n > 0 {
            sum / n as f64
        } else {
            f64::NAN
        }
    });
    let figures = [Some(explained), Some(rms_px).filter(|_| indexed > 0), chi2_per_pixel];
    let failed = if let Some(x) = figures.iter().flatten().find(|x| !x.is_finite()) {
        let what = match chi2_per_pixel {
            Some(c) if !c.is_finite() => {
                "Pearson chi2/pixel (no pixel where the model expects a photon)".to_string()
            }
            _ => format!("a figure of the fit ({x})"),
        };
        Some(format!("{what} is not finite: the fit cannot be judged"))
    } else if spots.len() < MIN_SPOTS {
        None
    } else if explained < min_explained {
        Some(format!(
            "the model explains {:.0} % of the {} observed spots (at least {:.0} % wanted)",
            100.0 * explained,
            spots.len(),
            100.0 * min_explained
        ))
    } else {
        None
    };
    let failed = failed.or_else(|| {
        chi2_per_pixel.filter(|&x| x > settings.max_chi2).map(|x| {
            format!(
                "Pearson chi2/pixel is {x:.2} (at most {} wanted): the model does not match the observed pixels",
                settings.max_chi2
            )
        })
    });
    Ok(FitCheck { spots: spots.len(), explained, indexed, rms_px, chi2_per_pixel, failed })
}

/// The parameters of the model and the observed image, checked against
/// each other.
fn start(
    inv: &Invocation,
    observed: Observed,
    settings: &Settings,
) -> Result<(Parameters, Observed)> {
    if !(1..=MAX_HISTORY).contains(&settings.history) {
        bail!("refine: -history {} is not from 1 to {MAX_HISTORY}", settings.history);
    }
    if !(0.0..=1.0).contains(&settings.min_explained) {
        bail!("refine: -min_explained {} is not from 0 to 1", settings.min_explained);
    }
    if settings.max_chi2.is_nan() || settings.max_chi2 < 1.0 {
        bail!("refine: -max_chi2 {} is not a number >= 1", settings.max_chi2);
    }
    let model = parameters(inv, &settings.params)?;
    let [w, h] = model.image_size();
    if observed.values.len() != w * h {
        bail!(
            "refine: the observed image has {} pixels but the detector has {} ({w} x {h})",
            observed.values.len(),
            w * h,
        );
    }
    let used = observed.values.iter().zip(&observed.skip).filter(|(_, &skip)| !skip);
    if !used.map(|(&v, _)| v).any(|v| v > 0.0) {
        bail!(
            "refine: the observed image ({}) has no photons in the pixels fitted: nothing to fit \
             (check -adc and -gain against the file's values)",
            observed.what
        );
    }
    Ok((model, observed))
}

/// The refined parameters of `inv`'s model, or why it cannot be refined.
fn parameters(inv: &Invocation, params: &[Target]) -> Result<Parameters> {
    if inv.batch_path.is_some() {
        bail!("refine: -batch is not supported (refine one image at a time)");
    }
    if inv.series.images > 1 || inv.shard.is_some() || inv.resume {
        bail!(
            "refine: -images, an -expt scan of several images, -shard and -resume are not supported (refine one image: give its -phi, and -observed_frame for a frame of a series file)"
        );
    }
    if let Some((path, n)) = &inv.expt_shots {
        bail!(
            "refine: -expt {} holds {n} experiments: refine one at a time (dials.split_experiments writes them apart)",
            path.display()
        );
    }
    if inv.gradient.is_some() {
        bail!("refine: -gradient is not supported here (refine computes its own derivatives)");
    }
    let seeds = seeds(inv)?;
    Parameters::of_targets(inv.config.clone(), seeds, params.to_vec()).map_err(|e| {
        match e.downcast_ref::<nanobragg_core::Error>() {
            Some(_) => anyhow!("{}", e.to_string().replace("invalid -gradient: ", "refine: ")),
            None => anyhow!("refine: -refine {e}"),
        }
    })
}

/// The seeds of every render of the fit ([`Invocation::seeds`]): `-misset
/// random` must not change, so it needs its seed.
fn seeds(inv: &Invocation) -> Result<SetupSeeds> {
    if inv.config.crystal.misset_seed.is_none() && inv.config.crystal.misset == Misset::Random {
        bail!(
            "refine: -misset random needs -misset_seed (the model must not change between renders)"
        )
    }
    Ok(inv.seeds().setup)
}

/// Run `nanobragg refine ARGS` (the arguments after `refine`).
pub fn main(args: &[String]) -> Result<()> {
    let Some(req) = split_args(args)? else { return Ok(()) };
    let inv = parse_args(&req.model_args)?;
    if inv.help {
        print!("{}", usage());
        return Ok(());
    }
    for w in &inv.warnings {
        eprintln!("warning: {w}");
    }
    let panels: Vec<String> = inv.config.detector.panels.iter().map(|p| p.name.clone()).collect();
    let mut params =
        Target::parse_list(&req.list, &panels).map_err(|e| anyhow!("refine: -refine: {e}"))?;
    if req.all {
        // every parameter that applies to this model (its first panel's,
        // with several), saying which are left out
        let exp = crate::panels::experiment(&inv, &inv.config, seeds(&inv)?, None)?;
        let (cfg, plan) = (&exp.configs[0], &exp.plans[0]);
        let plain: Vec<Param> = params.iter().map(|t| t.param).collect();
        let (mut keep, mut skipped) = nanobragg_core::diff::leaves::applicable(cfg, plan, &plain);
        if !panels.is_empty() {
            let (panel, model): (Vec<Param>, Vec<Param>) =
                keep.into_iter().partition(|p| crate::parameters::DETECTOR_PARAMS.contains(p));
            keep = model;
            if !panel.is_empty() {
                let names: Vec<&str> = panel.iter().map(|p| p.name()).collect();
                let own = crate::parameters::PANEL_PARAMS.map(|p| p.name()).join(", ");
                skipped.push(format!(
                    "{}: the panels move each on its own (refine their {own} as NAME@K)",
                    names.join(", ")
                ));
            }
        }
        if let Some(line) = crate::gradient::skipped_line("-refine", &skipped) {
            println!("note: {line}");
        }
        if keep.is_empty() {
            bail!("refine: -refine all: no parameter applies to this model");
        }
        params = keep.into_iter().map(Target::from).collect();
    }
    let settings = Settings {
        params,
        loss: req.loss,
        maxiter: req.maxiter,
        gtol: req.gtol,
        history: req.history,
        prefit: req.prefit,
        min_explained: req.min_explained,
        max_chi2: req.max_chi2,
    };
    // what is wrong with the model is said before what is wrong with the file
    let model = parameters(&inv, &settings.params)?;
    let mut observed = read_observed(&req.observed, req.frame, &inv, &model)?;
    observed.what = format!("{} ({})", req.observed.display(), observed.what);
    let print: Report = std::sync::Arc::new(|line: &str| println!("{line}"));
    let r = fit(&inv, observed, &settings, Some(print), req.all)?;
    println!(
        "{} after {} iterations, {} renders, {:.2} s",
        r.stop, r.iterations, r.evaluations, r.seconds
    );
    println!();
    println!(
        "{:<18} {:>6} {:>20} {:>20} {:>14} {:>14}",
        "parameter", "unit", "start", "refined", "std. error", "shift"
    );
    let failed = r.check.failed.is_some();
    for (i, p) in r.params.iter().enumerate() {
        // a failed fit's curvature says nothing about the errors: none shown
        let se = match r.standard_errors[i] {
            _ if failed => "-".into(),
            Some(s) => format!("{s:.4e}"),
            None => "singular".into(),
        };
        println!(
            "{:<18} {:>6} {:>20} {:>20} {:>14} {:>14}",
            p.to_string(),
            p.unit(),
            format!("{:.10}", r.start[i]),
            format!("{:.10}", r.values[i]),
            se,
            format!("{:.4e}", r.values[i] - r.start[i]),
        );
    }
    println!();
    println!("final loss {:.12e} ({}, {} pixels)", r.final_loss, r.loss, r.pixels);
    if r.loss == LossKind::Sse {
        println!("residual rms {:.6e} photons (standard errors scaled by it)", r.sigma2.sqrt());
    }
    if r.standard_errors.iter().any(Option::is_none) {
        println!("note: the information matrix is singular: some parameters are not determined");
    }
    let c = &r.check;
    println!(
        "fit check: {} observed spots, {:.1} % explained, {} indexed with rms {:.3} px{}",
        c.spots,
        100.0 * c.explained,
        c.indexed,
        c.rms_px,
        c.chi2_per_pixel
            .map(|x| format!(", Pearson chi2/pixel {x:.3} (mu >= 1)"))
            .unwrap_or_default()
    );
    println!("refined command line:");
    println!("nanobragg {}", r.command_line.join(" "));
    for n in r.notes {
        println!("note: {n}");
    }
    if let Some(why) = &c.failed {
        bail!("refine: the fit failed: {why}; the values above are not a solution");
    }
    Ok(())
}

/// Why an evaluation's loss or gradient is not finite, if it is not.
fn not_finite(e: &Eval) -> Option<String> {
    if !e.value.is_finite() {
        return Some(format!("loss {}", e.value));
    }
    let bad = e.gradient.iter().filter(|g| !g.is_finite()).count();
    (bad > 0).then(|| format!("{bad} gradient components not finite"))
}

/// `name = value` for each parameter, for messages.
fn at_values(params: &[Target], values: &[f64]) -> String {
    let each: Vec<String> =
        params.iter().zip(values).map(|(p, v)| format!("{p} = {v} {}", p.unit())).collect();
    each.join(", ")
}

fn values_at(start: &[f64], map: &[f64], x: &[f64]) -> Vec<f64> {
    let n = start.len();
    (0..n).map(|i| start[i] + (0..n).map(|j| map[i * n + j] * x[j]).sum::<f64>()).collect()
}

/// `T` with `Tᵀ H T = 1` (`T = L⁻ᵀ`, `H = L Lᵀ`), for a positive-definite
/// `H`; where `H` is (nearly) singular, the diagonal scaling `1/sqrt(Hᵢᵢ)`.
fn whitening(h: &[f64], n: usize) -> Vec<f64> {
    let d: Vec<f64> = (0..n).map(|i| 1.0 / h[i * n + i].sqrt()).collect();
    let mut diag = vec![0.0; n * n];
    for i in 0..n {
        diag[i * n + i] = d[i];
    }
    // Cholesky of the unit-diagonal D H D = L Lᵀ; then T = D L⁻ᵀ
    let m: Vec<f64> = (0..n * n).map(|ij| h[ij] * d[ij / n] * d[ij % n]).collect();
    let mut l = vec![0.0f64; n * n];
    for i in 0..n {
        for j in 0..=i {
            let mut s = m[i * n + j];
            for k in 0..j {
                s -= l[i * n + k] * l[j * n + k];
            }
            if i == j {
                if s.is_nan() || s <= 1e-12 {
                    return diag;
                }
                l[i * n + i] = s.sqrt();
            } else {
                l[i * n + j] = s / l[j * n + j];
            }
        }
    }
    // L⁻ᵀ: solve Lᵀ X = 1 column by column (X upper triangular)
    let mut x = vec![0.0f64; n * n];
    for c in 0..n {
        for i in (0..n).rev() {
            let mut s = if i == c { 1.0 } else { 0.0 };
            for k in i + 1..n {
                s -= l[k * n + i] * x[k * n + c];
            }
            x[i * n + c] = s / l[i * n + i];
        }
    }
    (0..n * n).map(|ij| d[ij / n] * x[ij]).collect()
}

/// Digits after the point for a value with standard error `se`.
fn decimals(v: f64, se: Option<f64>) -> usize {
    let err = se.filter(|s| *s > 0.0).unwrap_or(v.abs().max(1e-300) * 1e-10);
    ((-(err * 1e-3).log10()).ceil().max(0.0) as usize).min(15)
}

/// The refined experiment's command line: the start's invocation with
/// the refined values (each rounded to a thousandth of its standard error;
/// whole cells for `Na`, `Nb`, `Nc`), written by
/// [`crate::command_line::to_args`] (outputs left out), and notes on what
/// it cannot carry.
pub fn refined_command_line(
    inv: &Invocation,
    model: &Parameters,
    values: &[f64],
    se: &[Option<f64>],
) -> (Vec<String>, Vec<String>) {
    let mut notes = Vec::new();
    let mut rounded = values.to_vec();
    for (i, t) in model.params.iter().enumerate() {
        let (p, v) = (t.param, values[i]);
        rounded[i] = match p {
            Param::Na | Param::Nb | Param::Nc => {
                let (flag, _) = crate::parameters::flag_of(p).expect("-Na, -Nb, -Nc");
                let whole = v.round().max(1.0);
                if (v - whole).abs() > 1e-9 {
                    notes.push(format!(
                        "{flag} takes whole cells (the flag truncates like nanoBragg.c): {p} refined to {v} is written as {whole}"
                    ));
                }
                whole
            }
            _ => format!("{:.*}", decimals(v, se[i]), v).parse().unwrap_or(v),
        };
        if p == Param::Fluence && inv.config.beam.flux > 0.0 {
            notes.push(
                "-flux was given: the refined -fluence replaces the fluence it implies; drop -flux"
                    .into(),
            );
        }
    }
    let mut refined = inv.clone();
    refined.config = match model.config(&rounded) {
        Ok(cfg) => cfg,
        Err(e) => return (Vec::new(), vec![format!("no refined command line: {e:#}")]),
    };
    // (amplitudes a library set, from no file)
    if matches!(refined.config.sf.source, SfSource::Hkl(_)) && inv.hkl_path.is_none() {
        refined.config.sf.source = SfSource::None;
        notes.push(
            "the structure factors were set from arrays: the refined command line leaves them out \
             (write them to a file for -hkl)"
                .into(),
        );
    }
    // no flag holds a panel's place: the refined origin, said
    let mut moved: Vec<usize> = model.params.iter().filter_map(|t| t.panel).collect();
    moved.sort_unstable();
    moved.dedup();
    for &k in &moved {
        let panel = &refined.config.detector.panels[k];
        let o = panel.origin_mm.map(|x| format!("{x:.6}"));
        notes.push(format!(
            "panel {k} ({}) refined: its first pixel's outer corner at ({}, {}, {}) mm from the sample; the geometry file on the command line holds the start's",
            panel.name, o[0], o[1], o[2]
        ));
        refined.config.detector.panels[k] = inv.config.detector.panels[k].clone();
    }
    // the fit used the starting model's automatic choice (each panel's); at
    // the refined values nanoBragg's rule may pick another
    let auto: Vec<i64> = model.auto_oversample().into_iter().flatten().collect();
    if let Some(&n) = auto.first() {
        if auto.iter().all(|&m| m == n) {
            refined.config.sampling.oversample = n;
            notes.push(format!(
                "-oversample {n} is the automatic choice of the starting model, kept fixed in the fit"
            ));
        } else {
            let each: Vec<String> = auto.iter().map(|n| n.to_string()).collect();
            notes.push(format!(
                "the panels' automatic oversampling of the starting model ({}) was kept fixed in the fit; no one -oversample gives it",
                each.join(", ")
            ));
        }
    }
    use crate::command_line::to_args;
    let line = match to_args(&refined) {
        Ok(line) => line,
        Err(first) => {
            // a detector file places the detector: the start's place, with
            // the rest refined; else the start's detector
            let (d, d0) = (&mut refined.config.detector, &inv.config.detector);
            (d.distance_mm, d.close_distance_mm, d.pixel_mm) =
                (d0.distance_mm, d0.close_distance_mm, d0.pixel_mm);
            (d.xbeam_mm, d.ybeam_mm, d.xclose_mm, d.yclose_mm) =
                (d0.xbeam_mm, d0.ybeam_mm, d0.xclose_mm, d0.yclose_mm);
            (d.orgx_px, d.orgy_px, d.pivot) = (d0.orgx_px, d0.orgy_px, d0.pivot);
            match to_args(&refined) {
                Ok(line) => line,
                Err(_) => {
                    refined.config.detector = inv.config.detector.clone();
                    match to_args(&refined) {
                        Ok(line) => line,
                        Err(_) => {
                            notes.push(format!("no refined command line: {first}"));
                            return (Vec::new(), notes);
                        }
                    }
                }
            }
        }
    };
    // each refined value the line does not give, said
    let own: Vec<(Target, f64)> =
        (model.params.iter().copied().zip(rounded)).filter(|(t, _)| t.panel.is_none()).collect();
    let targets: Vec<Target> = own.iter().map(|&(t, _)| t).collect();
    let given = parse_args(&line).ok().and_then(|again| parameters(&again, &targets).ok());
    let file = inv.detector_files.last().map(|(p, _)| p.display().to_string());
    for (i, &(t, want)) in own.iter().enumerate() {
        let got = given.as_ref().map(|g| g.start()[i]);
        if got.is_none_or(|got| (got - want).abs() > 1e-9 * want.abs().max(1.0)) {
            let place = match &file {
                Some(f) => format!(" ({f} places the detector: put it in the file)"),
                None => String::new(),
            };
            notes.push(format!("the refined {t} {want} is not on the command line{place}"));
        }
    }
    (line, notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn misset_branch_nearest_the_start() {
        use nanobragg_core::vec3::rotate;
        let params =
            [Param::Distance, Param::MissetX, Param::MissetY, Param::MissetZ].map(Target::from);
        let start = [100.0, 10.0, -89.5, 30.0];
        // the other branch of a fit that ended by the start
        let fit = [100.2, 10.3 + 180.0, 180.0 + 89.7, 30.1 + 180.0 - 360.0];
        let got = nearest_misset_branch(&params, &start, fit.to_vec());
        let want = [100.2, 10.3, -89.7, 30.1];
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-9, "{got:?}");
        }
        // the same rotation
        let r = |t: &[f64]| {
            rotate([0.3, -0.5, 0.8], t[1].to_radians(), t[2].to_radians(), t[3].to_radians())
        };
        let (p, q) = (r(&fit), r(&got));
        assert!((0..3).all(|i| (p[i] - q[i]).abs() < 1e-12), "{p:?} {q:?}");
        // a fit by the start is left exactly as it is, and so is one angle alone
        let close = vec![100.2, 10.3, -89.7, 30.1];
        assert_eq!(nearest_misset_branch(&params, &start, close.clone()), close);
        let one = [Target::from(Param::MissetY)];
        assert_eq!(nearest_misset_branch(&one, &[-89.5], vec![269.7]), vec![269.7]);
    }

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn the_refined_command_line_parses_back_to_the_refined_values() {
        let base = "-default_F 100 -cell 40 40 40 90 90 90 -detpixels 32 -pixel 0.4 -distance 60";
        let with = |model: &str, p: Param, v: f64| {
            let args: Vec<String> = model.split_whitespace().map(String::from).collect();
            let inv = parse_args(&args).unwrap();
            let m = parameters(&inv, &[Target::from(p)]).unwrap();
            let (line, notes) = refined_command_line(&inv, &m, &[v], &[None]);
            let again = parse_args(&line).unwrap_or_else(|e| panic!("{line:?} {notes:?}: {e}"));
            assert!(!notes.iter().any(|n| n.contains("not on the command line")), "{notes:?}");
            (line.join(" "), notes, again.config)
        };
        // over the flags that set the value too (-N, -energy, -divergence)
        let (line, _, cfg) = with(&format!("{base} -lambda 1 -N 5"), Param::Na, 7.0);
        assert_eq!((cfg.crystal.na, cfg.crystal.nb), (7.0, 5.0), "{line}");
        let (line, _, cfg) =
            with(&format!("{base} -lambda 1 -energy 12398.42 -N 5"), Param::Lambda, 1.01);
        assert!((cfg.beam.lambda_a - 1.01).abs() < 1e-12, "{line}");
        let (line, _, cfg) =
            with(&format!("{base} -lambda 1 -divergence 0.2 -N 5"), Param::Divergence, 0.3);
        assert_eq!(cfg.beam.hdivrange_mrad, 0.3, "{line}");
        let (line, notes, cfg) = with(&format!("{base} -lambda 1 -N 5"), Param::Xbeam, 6.5);
        assert_eq!(cfg.detector.xbeam_mm, Some(6.5), "{line}");
        // the automatic oversampling the fit held, said and written
        assert!(line.contains("-oversample ") && notes[0].contains("kept fixed"), "{line}");
        // whole cells, with a note
        let (line, notes, cfg) = with(&format!("{base} -lambda 1 -N 5"), Param::Nb, 6.6);
        assert_eq!(cfg.crystal.nb, 7.0, "{line}");
        assert!(notes.iter().any(|n| n.contains("is written as 7")), "{notes:?}");
    }

    #[test]
    fn refine_flags_are_split_off() {
        let r = split_args(&s(&[
            "-distance",
            "90",
            "-observed",
            "o.bin",
            "-refine",
            "distance,Na",
            "-maxiter",
            "7",
            "-N",
            "3",
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(r.model_args, s(&["-distance", "90", "-N", "3"]));
        assert_eq!(r.list, "distance,Na");
        assert_eq!((r.maxiter, r.loss), (7, None));
        let e = split_args(&s(&["-refine", "distance"])).unwrap_err();
        assert!(e.to_string().contains("-observed FILE is required"), "{e}");
        let e = split_args(&s(&["-observed", "x", "-refine", "bogus"])).unwrap_err();
        assert!(e.to_string().contains("unknown parameter 'bogus'"), "{e}");
        let e = split_args(&s(&["-observed", "x", "-refine", "Na", "-loss", "l1"])).unwrap_err();
        assert!(e.to_string().contains("-loss: 'l1' is not sse or poisson"), "{e}");
    }
}
