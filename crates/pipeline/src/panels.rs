//! A multi-panel detector's run resolved once: every panel planned as its
//! own single panel, where each lies in the one image the run writes, and
//! the plan of that whole image (what its statistics, integer, noise, NXmx
//! and SMV outputs are made from). The command's render, `-batch`, and the
//! Python binding share it.

use crate::invocation::Invocation;
use crate::render::{explain, render_plan_into};
use anyhow::{anyhow, Result};
use nanobragg_core::config::SimConfig;
use nanobragg_core::geometry::{panel_configs, Detector, PanelLayout};
use nanobragg_core::render::RenderInfo;
use nanobragg_core::setup::{plan_panels, Plan, SetupSeeds};

/// Every panel of a multi-panel configuration, planned.
#[derive(Debug, Clone)]
pub struct PanelRun {
    /// Each panel's single-panel configuration ([`panel_configs`]).
    pub configs: Vec<SimConfig>,
    /// Each panel's plan.
    pub plans: Vec<Plan>,
    /// Where each panel's pixels lie in the written image.
    pub layout: PanelLayout,
    /// The first panel's plan grown to the whole image, its pixels between
    /// panels masked: the written images' header values (SMV describes one
    /// panel), their ROI and the pixels their statistics count.
    pub whole: Plan,
}

impl PanelRun {
    /// Plans every panel of `config` (the invocation's, or one shot's of a
    /// batch); `inv` names the flags and files of a setup error. The panels
    /// hold one structure-factor grid: that of `with` where given (a plan of
    /// another shot of the run). Panels of several pixel sizes are refused:
    /// they are written as one image.
    pub fn new(
        inv: &Invocation,
        config: &SimConfig,
        seeds: SetupSeeds,
        with: Option<&Plan>,
    ) -> Result<PanelRun> {
        // (a panel's own error first)
        let configs = panel_configs(config).map_err(|e| explain(e, inv))?;
        let plans = plan_panels(&configs, seeds, with).map_err(|e| explain(e, inv))?;
        let panels = &config.detector.panels;
        let layout = PanelLayout::new(&config.detector).map_err(|e| explain(e, inv))?;
        let d0 = &plans[0].detector;
        for (p, plan) in panels.iter().zip(&plans) {
            let d = &plan.detector;
            if d.pixel_size_m != d0.pixel_size_m {
                return Err(anyhow!(
                    "{}: panel {} has pixels of {} mm, panel {} of {} mm: the panels are written as one image, which needs one pixel size",
                    crate::render::detector_file(inv).unwrap_or_else(|| "-expt".into()),
                    p.name, d.pixel_size_m * 1e3, panels[0].name, d0.pixel_size_m * 1e3
                ));
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
        Ok(PanelRun { configs, plans, layout, whole })
    }

    /// The panels' detectors, in order.
    pub fn detectors(&self) -> Vec<&Detector> {
        self.plans.iter().map(|p| &p.detector).collect()
    }

    /// Pixels of the whole image.
    pub fn pixels(&self) -> usize {
        self.layout.width * self.layout.height
    }

    /// Renders every panel into its place of `image` (the whole image,
    /// zeros; the pixels between panels stay 0) with the invocation's
    /// precision, threads and device, and returns each panel's [`RenderInfo`].
    /// On the CPU the panels render side by side: a thread done with its
    /// part of one panel takes rows of another instead of waiting.
    pub fn render_into(&self, inv: &Invocation, image: &mut [f32]) -> Result<Vec<RenderInfo>> {
        assert_eq!(image.len(), self.pixels(), "PanelRun::render_into: image of the wrong size");
        let stacked = self.layout.is_stacked();
        // panels stacked in order render straight into their rows of the
        // image; others into their own, copied into place
        let mut own: Vec<Vec<f32>> = match stacked {
            true => Vec::new(),
            false => (self.plans.iter())
                .map(|p| vec![0.0; p.detector.fpixels * p.detector.spixels])
                .collect(),
        };
        let mut slices: Vec<&mut [f32]> = Vec::with_capacity(self.plans.len());
        if stacked {
            let mut rest = &mut *image;
            for plan in &self.plans {
                let (panel, tail) =
                    rest.split_at_mut(plan.detector.fpixels * plan.detector.spixels);
                slices.push(panel);
                rest = tail;
            }
        } else {
            slices.extend(own.iter_mut().map(|v| &mut v[..]));
        }
        let one = |(plan, panel): (&Plan, &mut &mut [f32])| render_plan_into(inv, plan, panel);
        let infos: Vec<RenderInfo> = if inv.uses_gpu() {
            self.plans.iter().zip(slices.iter_mut()).map(one).collect::<Result<_>>()?
        } else {
            use rayon::prelude::*;
            // in a pool of the invocation's threads, which each panel's
            // render then uses as its own (the binding's `threads=N` bounds
            // the whole image, not each panel)
            nanobragg_core::render::cpu::in_pool(inv.threads, || {
                self.plans.par_iter().zip(slices.par_iter_mut()).map(one).collect::<Result<_>>()
            })?
        };
        drop(slices);
        for (k, panel) in own.iter().enumerate() {
            self.layout.put(k, panel, image);
        }
        Ok(infos)
    }

    /// The whole image rendered into memory (see [`Self::render_into`]).
    pub fn render(&self, inv: &Invocation) -> Result<(Vec<f32>, Vec<RenderInfo>)> {
        let mut image = vec![0.0f32; self.pixels()];
        let infos = self.render_into(inv, &mut image)?;
        Ok((image, infos))
    }

    /// Pixel (`f`, `s`) of the whole image as panel `k`'s own (fast, slow),
    /// `None` where it is not on that panel.
    pub fn on_panel(&self, k: usize, f: i64, s: i64) -> Option<(usize, usize)> {
        let ([x, y], [fp, sp]) = (self.layout.origins[k], self.layout.sizes[k]);
        let (f, s) = (f.checked_sub(x as i64)?, s.checked_sub(y as i64)?);
        ((0..fp as i64).contains(&f) && (0..sp as i64).contains(&s))
            .then_some((f as usize, s as usize))
    }

    /// Panel `k`'s pixels of the whole image, as a slice where the panels
    /// are stacked in order.
    pub fn panel<'a>(&self, k: usize, image: &'a [f32]) -> std::borrow::Cow<'a, [f32]> {
        let [f, s] = self.layout.sizes[k];
        match self.layout.is_stacked() {
            true => {
                let start = self.layout.origins[k][1] * self.layout.width;
                std::borrow::Cow::Borrowed(&image[start..start + f * s])
            }
            false => std::borrow::Cow::Owned(self.layout.get(k, image)),
        }
    }
}
