//! The one dispatcher: a command line picks its driver. The subcommands
//! (`refine`, `dataset`, `noisify`, `nonbragg`, `add`, and the programs
//! linked under noisify's and nonBragg's names) each have their own; a
//! render is refused here for what no driver can do (its plan, a bad
//! `-gradient`, detector response or file format), then is one image of
//! the experiment ([`crate::run::run`], every panel of the detector) or a
//! batch of shots ([`crate::batch::run_batch`]); the drivers choose what to
//! write.

use crate::invocation::Invocation;
use crate::render::Seeds;
use anyhow::{anyhow, bail, Context, Result};
use nanobragg_core::config::SimConfig;
use nanobragg_core::setup::Plan;
use nanobragg_core::Experiment;
use std::io::Write;

/// Runs the program as invoked: under the name `noisify` (a link to the
/// binary) or `nonBragg` as that program, else as `nanobragg` (see [`main_with_args`]).
pub fn main_as(program: &str, args: &[String]) -> Result<()> {
    let name = std::path::Path::new(program).file_name().and_then(|n| n.to_str());
    match name {
        Some("noisify") => crate::noisify::run(args, &mut std::io::stdout().lock()),
        Some("nonBragg") => crate::nonbragg::run(args, &mut std::io::stdout().lock()),
        _ => main_with_args(args),
    }
}

/// Runs the command line `args` (without the program name): a render, or
/// the subcommands `refine`, `dataset`, `noisify`, `nonbragg`, `add` and `sf`.
pub fn main_with_args(args: &[String]) -> Result<()> {
    match args.first().map(String::as_str) {
        Some("refine") => crate::refine::main(&args[1..]),
        Some("dataset") => crate::dataset::main(&args[1..]),
        Some("noisify") => crate::noisify::run(&args[1..], &mut std::io::stdout().lock()),
        Some("add") => crate::add::run(&args[1..], &mut std::io::stdout().lock()),
        Some("sf") => crate::sf::run(&args[1..], &mut std::io::stdout().lock()),
        Some("nonbragg") => crate::nonbragg::run(&args[1..], &mut std::io::stdout().lock()),
        _ => crate::parse_args(args).map_err(anyhow::Error::from).and_then(run),
    }
}

/// Runs a parsed render command line with its output files.
pub fn run(inv: Invocation) -> Result<()> {
    if inv.help {
        // (print! would panic on a closed pipe: `nanobragg -h | head`)
        std::io::stdout().lock().write_all(crate::flags::help_text().as_bytes())?;
        return Ok(());
    }
    for w in &inv.warnings {
        eprintln!("warning: {w}");
    }
    if inv.threads > 0 {
        // every parallel pass (statistics, conversions) then keeps to -threads
        let _ = rayon::ThreadPoolBuilder::new().num_threads(inv.threads).build_global();
    }
    let Seeds { setup: seeds, noise_idum } = inv.seeds();
    // (nanoBragg.c keeps seeds negated)
    let noise_seed = noise_idum.wrapping_neg();
    crate::series::check(&inv)?;
    check_expt_shots(&inv)?;
    let exp = crate::panels::experiment(&inv, &inv.config, seeds, None)?;
    check_experiment(&inv, &exp)?;
    // (an -expt list's experiments may differ in detector: each is checked
    // before the first is written)
    for (k, cfg) in inv.shot_configs.iter().enumerate().skip(1) {
        let shot = crate::panels::experiment(&inv, cfg, seeds, Some(&exp.plans[0]))
            .with_context(|| format!("-expt shot {} (experiment {k})", k + 1))?;
        check_experiment(&inv, &shot)
            .with_context(|| format!("-expt shot {} (experiment {k})", k + 1))?;
    }
    match &inv.batch_path {
        Some(batch) => crate::batch::run_batch(&inv, batch, seeds, noise_seed, &exp.plans[0]),
        None if !inv.shot_configs.is_empty() => {
            crate::batch::run_expt_shots(&inv, seeds, noise_seed, &exp.plans[0])
        }
        None if inv.series.images > 1 => {
            crate::series::run_series(&inv, seeds, noise_seed, &exp.plans[0])
        }
        None => crate::run::run(&inv, &exp, seeds, noise_idum),
    }
}

/// Refuses what the shots of an `-expt` list of several experiments cannot
/// do: each experiment is one still shot, written as `-batch` writes its
/// shots.
fn check_expt_shots(inv: &Invocation) -> Result<()> {
    let Some((path, n)) = &inv.expt_shots else { return Ok(()) };
    let refused = [
        ("-batch", inv.batch_path.is_some()),
        ("-images", inv.series.images > 1),
        ("-gradient", inv.gradient.is_some()),
        ("-printout", inv.printout),
    ];
    if let Some((flag, _)) = refused.iter().find(|(_, given)| *given) {
        anyhow::bail!(
            "{flag}: not with -expt {}, whose {n} experiments are rendered one shot each",
            path.display()
        );
    }
    Ok(())
}

/// Refuses, before anything is written, a bad `-gradient` (printing what
/// `all` left out) and a bad detector response, for the model of `cfg`.
fn check_outputs(inv: &Invocation, cfg: &SimConfig, plan: &Plan) -> Result<()> {
    if let Some((_, Some(skipped))) = crate::gradient::selected(inv, cfg, plan)? {
        eprintln!("note: {skipped}");
    }
    crate::detector_response::response(&inv.outputs, plan.detector.pixel_size_m)?;
    Ok(())
}

/// What a render of `exp` cannot do: see [`check_outputs`] (for the first
/// panel's model); miniCBF of more than one panel (a file holds one), and
/// NXmx and miniCBF of a curved detector.
fn check_experiment(inv: &Invocation, exp: &Experiment) -> Result<()> {
    if inv.outputs.cbffile.is_some() && exp.plans.len() > 1 {
        return Err(anyhow!(
            "-cbffile: miniCBF holds one panel; this detector has {}: write -nxmxfile",
            exp.plans.len()
        ));
    }
    if inv.outputs.cbffile.is_some() {
        let plan = &exp.plans[0];
        let d = &plan.detector;
        let rotates = plan.osc_rad != 0.0;
        if let Some(why) =
            nanobragg_io::cbf::unheld_geometry(d.fdet, d.sdet, d.beam, d.spindle, rotates)
        {
            bail!("-cbffile: {why}: write -nxmxfile, which holds any geometry");
        }
    }
    check_outputs(inv, &exp.configs[0], &exp.plans[0])?;
    if inv.config.detector.curved {
        // (their geometry is a flat module's: a reader would place the pixels elsewhere)
        for (flag, given) in
            [("-nxmxfile", &inv.outputs.nxmxfile), ("-cbffile", &inv.outputs.cbffile)]
        {
            if given.is_some() {
                bail!("{flag}: the file describes a flat detector; -curved_det places the pixels on a sphere (write -floatfile, -intfile or -noisefile)");
            }
        }
    }
    Ok(())
}
