//! An experiment as the physics uses it: every panel of the detector planned
//! as its own single panel (a detector without a panel list is one panel),
//! the panels holding one structure-factor grid, and where each panel's
//! pixels lie in the one image a run writes.
//!
//! The command's render, `-batch`, `-gradient`, the dataset and the Python
//! binding take one; refine's parameter model starts from one (and plans its
//! panels again at each set of values).

use crate::config::SimConfig;
use crate::error::{Error, Result};
use crate::geometry::{panel_configs, Detector, PanelLayout};
use crate::setup::{plan_panels, Plan, SetupSeeds};

/// Every panel of a configuration, planned (see the module docs).
#[derive(Debug, Clone)]
pub struct Experiment {
    /// Each panel's single-panel configuration ([`panel_configs`]).
    pub configs: Vec<SimConfig>,
    /// Each panel's plan.
    pub plans: Vec<Plan>,
    /// Each panel's name (`-expt`, `-geom`); `None` for a detector given by
    /// its flags alone.
    pub names: Vec<Option<String>>,
    /// Where each panel's pixels lie in the written image.
    pub layout: PanelLayout,
    /// The plan of the whole image where it is not the one panel's own.
    whole: Option<Plan>,
}

impl Experiment {
    /// Plans every panel of `config`. The panels hold one structure-factor
    /// grid: that of `with` where given (a plan of another shot of the run).
    /// Panels of several pixel sizes are refused: they are written as one
    /// image.
    pub fn new(config: &SimConfig, seeds: SetupSeeds, with: Option<&Plan>) -> Result<Experiment> {
        Self::new_adjusted(config, seeds, with, |_, _| {})
    }

    /// [`Experiment::new`], with `adjust(k, config)` applied to panel `k`'s
    /// configuration before it is planned (refine holds each panel's
    /// automatic oversampling at its value for the start geometry, so that
    /// a small step of the geometry cannot change the sampling).
    pub fn new_adjusted(
        config: &SimConfig,
        seeds: SetupSeeds,
        with: Option<&Plan>,
        adjust: impl Fn(usize, &mut SimConfig),
    ) -> Result<Experiment> {
        // (a panel's own error first)
        let mut configs = panel_configs(config)?;
        configs.iter_mut().enumerate().for_each(|(k, c)| adjust(k, c));
        let plans = plan_panels(&configs, seeds, with)?;
        let panels = &config.detector.panels;
        let d0 = &plans[0].detector;
        if panels.is_empty() {
            // the detector of the flags: one panel, the whole image
            let layout = PanelLayout::whole(d0.fpixels, d0.spixels);
            return Ok(Experiment { configs, plans, names: vec![None], layout, whole: None });
        }
        let layout = PanelLayout::new(&config.detector)?;
        for (p, plan) in panels.iter().zip(&plans) {
            let d = &plan.detector;
            if d.pixel_size_m != d0.pixel_size_m {
                return Err(Error::Invalid {
                    what: "-expt",
                    msg: format!(
                        "panel {} has pixels of {} mm, panel {} of {} mm: the panels are written as one image, which needs one pixel size",
                        p.name,
                        d.pixel_size_m * 1e3,
                        panels[0].name,
                        d0.pixel_size_m * 1e3
                    ),
                });
            }
        }
        let mut whole = plans[0].clone();
        let (fp, sp) = (layout.width, layout.height);
        whole.detector.fpixels = fp;
        whole.detector.spixels = sp;
        whole.detector.detsize_f_m = fp as f64 * d0.pixel_size_m;
        whole.detector.detsize_s_m = sp as f64 * d0.pixel_size_m;
        whole.detector.roi = layout.roi(&config.detector);
        whole.mask = match (config.detector.mask.clone(), layout.coverage()) {
            (Some(mut mask), Some(covered)) => {
                mask.iter_mut().zip(covered).for_each(|(m, c)| *m = if c == 0 { 0 } else { *m });
                Some(mask)
            }
            (mask, covered) => mask.or(covered),
        };
        let names = panels.iter().map(|p| Some(p.name.clone())).collect();
        Ok(Experiment { configs, plans, names, layout, whole: Some(whole) })
    }

    /// The plan of the whole written image: the first panel's grown to the
    /// image, its pixels between panels masked (the written images' header
    /// values, their ROI and the pixels their statistics count); the panel's
    /// own plan where there is one panel without a place of its own.
    pub fn whole(&self) -> &Plan {
        self.whole.as_ref().unwrap_or(&self.plans[0])
    }

    /// The panels' detectors, in order.
    pub fn detectors(&self) -> Vec<&Detector> {
        self.plans.iter().map(|p| &p.detector).collect()
    }

    /// Pixels of the whole image.
    pub fn pixels(&self) -> usize {
        self.layout.width * self.layout.height
    }

    /// Pixel (`f`, `s`) of the whole image as panel `k`'s own (fast, slow),
    /// `None` where it is not on that panel.
    pub fn on_panel(&self, k: usize, f: i64, s: i64) -> Option<(usize, usize)> {
        let ([x, y], [fp, sp]) = (self.layout.origins[k], self.layout.sizes[k]);
        let (f, s) = (f.checked_sub(x as i64)?, s.checked_sub(y as i64)?);
        ((0..fp as i64).contains(&f) && (0..sp as i64).contains(&s))
            .then_some((f as usize, s as usize))
    }
}
