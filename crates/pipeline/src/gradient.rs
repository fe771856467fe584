//! `-gradient`: derivative images of every pixel by chosen parameters,
//! written next to the usual outputs; `-curvatures`: second derivatives
//! (see docs/derivatives.md).
//!
//! A multi-panel detector's derivative images stack the panels' rows as its
//! float image does. The detector parameters are then each panel's own
//! (`close_distance`, `Xbeam`, `Ybeam`, `detector_rot*`, `twotheta` of the
//! panel's single-panel flags): a panel's rows hold its pixels' derivatives
//! by its own move, which no other panel's pixels depend on.

use crate::invocation::{Curvatures, Invocation};
use anyhow::{anyhow, Result};
use nanobragg_core::config::SimConfig;
use nanobragg_core::diff::leaves::{applicable, check_param};
use nanobragg_core::diff::{hessian_of, jacobian_of, Param};
use nanobragg_core::render::RenderOptions;
use nanobragg_core::setup::{Plan, SetupSeeds};
use nanobragg_core::Experiment;
use nanobragg_io::atomic::Pending;
use nanobragg_io::image_writer::{self, Image};
use std::io::Write;
use std::path::PathBuf;

/// The parameters of `-gradient`, each checked against the plan of `cfg`
/// (a panel's, with several); `None` without the flag. Errors name the
/// flag and the parameter.
pub fn params(inv: &Invocation, cfg: &SimConfig, plan: &Plan) -> Result<Option<Vec<Param>>> {
    Ok(selected(inv, cfg, plan)?.map(|(params, _)| params))
}

/// Refuses `distance` on a multi-panel detector: its panels are placed by
/// their closest points, so a panel's distance along the beam moves nothing.
fn check_panel_param(inv: &Invocation, p: Param) -> Result<()> {
    if p == Param::Distance && inv.config.detector.panels.len() > 1 {
        return Err(anyhow!(
            "invalid -gradient: distance: the panels of a multi-panel detector are placed by their closest points: use close_distance (each panel's own)"
        ));
    }
    Ok(())
}

/// True for the parameter list `all`.
pub fn is_all(list: &str) -> bool {
    list.trim().eq_ignore_ascii_case("all")
}

/// The line saying which parameters `all` left out and why, if any
/// (`-gradient all: skipped mosaic: needs ...; osc: ...`).
pub fn skipped_line(flag: &str, skipped: &[String]) -> Option<String> {
    if skipped.is_empty() {
        return None;
    }
    Some(format!("{flag} all: skipped {}", skipped.join("; ")))
}

/// [`params`], with the line saying what `all` left out (see [`skipped_line`]).
pub fn selected(
    inv: &Invocation,
    cfg: &SimConfig,
    plan: &Plan,
) -> Result<Option<(Vec<Param>, Option<String>)>> {
    if inv.gradfile.is_empty() {
        return Err(anyhow!("-gradfile: the file name prefix is empty"));
    }
    let Some(list) = &inv.gradient else {
        if inv.curvatures != Curvatures::None {
            return Err(anyhow!("invalid -curvatures: needs -gradient (the parameters)"));
        }
        return Ok(None);
    };
    if inv.batch_path.is_some() {
        return Err(anyhow!("invalid -gradient: not with -batch"));
    }
    let params = Param::parse_list(list)?;
    if is_all(list) {
        // every parameter that applies to this model
        let (mut params, skipped) = applicable(cfg, plan, &params);
        params.retain(|&p| check_panel_param(inv, p).is_ok());
        if params.is_empty() {
            return Err(anyhow!("invalid -gradient: no parameter applies to this model"));
        }
        return Ok(Some((params, skipped_line("-gradient", &skipped))));
    }
    for &p in &params {
        check_panel_param(inv, p)?;
        check_param(cfg, plan, p)?;
    }
    Ok(Some((params, None)))
}

/// The file of the derivative image by `p`: `PREFIX_NAME.bin`.
pub fn file_name(prefix: &str, p: Param) -> PathBuf {
    PathBuf::from(format!("{prefix}_{}.bin", p.name()))
}

/// The file of the second derivative by `a` and `b`: `PREFIX_A_B.bin`.
pub fn file_name2(prefix: &str, a: Param, b: Param) -> PathBuf {
    PathBuf::from(format!("{prefix}_{}_{}.bin", a.name(), b.name()))
}

/// What a derivative image holds, for the report.
fn per(a: Param, b: Option<Param>) -> String {
    match b {
        None => format!("d pixel / d {a}, photons {}", a.per_unit()),
        Some(b) if a == b => format!("d² pixel / d {a}², photons {} squared", a.per_unit()),
        Some(b) => format!("d² pixel / d {a} d {b}, photons {} {}", a.per_unit(), b.per_unit()),
    }
}

/// The files of `-gradient` and `-curvatures` (none without the flag), in
/// the order they are written: each parameter's derivative, then (with
/// `-curvatures`) its second derivative, then the mixed ones by pairs.
fn names(inv: &Invocation, params: &[Param]) -> Vec<(PathBuf, String)> {
    let mut names = Vec::new();
    for &p in params {
        names.push((file_name(&inv.gradfile, p), per(p, None)));
        if inv.curvatures != Curvatures::None {
            names.push((file_name2(&inv.gradfile, p, p), per(p, Some(p))));
        }
    }
    if inv.curvatures == Curvatures::Mixed {
        for (i, &a) in params.iter().enumerate() {
            for &b in &params[i + 1..] {
                names.push((file_name2(&inv.gradfile, a, b), per(a, Some(b))));
            }
        }
    }
    names
}

/// The derivative image files, open under temporary names (see
/// [`nanobragg_io::atomic`]) before anything is rendered, so that an
/// unwritable one is refused before any output changes.
pub struct GradientFiles(Vec<(PathBuf, String, Pending)>);

/// Opens the files of `-gradient` and `-curvatures` (none without the
/// flag); the error names `-gradfile` and the file.
pub fn open(inv: &Invocation, cfg: &SimConfig, plan: &Plan) -> Result<GradientFiles> {
    let Some(params) = params(inv, cfg, plan)? else { return Ok(GradientFiles(Vec::new())) };
    let mut files = Vec::new();
    for (path, what) in names(inv, &params) {
        let file = crate::output_files::open_output("-gradfile", &path)?;
        files.push((path, what, file));
    }
    Ok(GradientFiles(files))
}

/// The derivative images of one panel, in the order of [`names`].
fn panel_images(
    inv: &Invocation,
    cfg: &SimConfig,
    plan: &Plan,
    params: &[Param],
    seeds: SetupSeeds,
) -> Result<Vec<Vec<f32>>> {
    let opts = RenderOptions::default().threads(inv.threads);
    let mut images: Vec<Vec<f32>> = Vec::new();
    if inv.curvatures == Curvatures::None {
        let j = jacobian_of(cfg, plan, params, seeds, opts, inv.precision)?;
        images.extend(j.derivatives);
    } else {
        // the hyper-dual renders carry the first derivatives too
        let mixed = inv.curvatures == Curvatures::Mixed;
        let h = hessian_of(cfg, plan, params, seeds, opts, mixed)?;
        for (g, d2) in h.gradient.into_iter().zip(h.diagonal) {
            images.push(g);
            images.push(d2);
        }
        images.extend(h.mixed.into_iter().map(|(_, _, d2)| d2));
    }
    Ok(images)
}

/// Computes the derivative images of `-gradient` and `-curvatures` into
/// `files` (from [`open`]), reporting each file on `out`; returns them,
/// keyed by their flag, for the caller to commit with its other outputs.
/// Every panel of `exp` in its place of the images.
pub fn write(
    inv: &Invocation,
    exp: &Experiment,
    seeds: SetupSeeds,
    out: &mut impl Write,
    files: GradientFiles,
) -> Result<Vec<(&'static str, Pending)>> {
    let Some(params) = params(inv, &exp.configs[0], &exp.plans[0])? else { return Ok(Vec::new()) };
    // in the order of names(), every panel in its place
    let (layout, mut images) = (&exp.layout, Vec::new());
    for (k, (cfg, plan)) in exp.configs.iter().zip(&exp.plans).enumerate() {
        let panel = panel_images(inv, cfg, plan, &params, seeds)?;
        if images.is_empty() {
            images = vec![vec![0.0; layout.width * layout.height]; panel.len()];
        }
        for (all, p) in images.iter_mut().zip(&panel) {
            layout.put(k, p, all);
        }
    }
    if images.len() != files.0.len() {
        return Err(anyhow!("-gradient: {} images for {} files", images.len(), files.0.len()));
    }
    let mut written = Vec::with_capacity(images.len());
    for ((path, what, mut file), d) in files.0.into_iter().zip(&images) {
        writeln!(out, "writing {} as {} 4-byte floats ({what})", path.display(), d.len())?;
        image_writer::write(&mut file, Image::Float(d))
            .map_err(|e| crate::output_files::write_error("-gradfile", e))?;
        written.push(("-gradfile", file));
    }
    out.flush()?;
    Ok(written)
}
