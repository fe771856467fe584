//! `-expt`: a DIALS experiment list as the detector, beam and crystal.
//! A single-panel list written from a golden case's geometry gives that
//! case's image; a multi-panel detector equals, panel by panel, renders of
//! the custom-vector flags of each panel; placement flags after `-expt` and
//! what a multi-panel run cannot write yet are refused.

mod common;

use common::{cases, float_file, scratch};
use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Output};

fn run(dir: &Path, args: &[String]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nanobragg")).args(args).current_dir(dir).output().unwrap()
}

fn ok(dir: &Path, args: &[String]) -> String {
    let out = run(dir, args);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn err(dir: &Path, args: &[String]) -> String {
    let out = run(dir, args);
    assert!(!out.status.success(), "{args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn words(s: &str) -> Vec<String> {
    s.split_whitespace().map(String::from).collect()
}

fn cross(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]]
}

fn dot(a: [f64; 3], b: [f64; 3]) -> f64 {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
}

fn v(x: [f64; 3]) -> String {
    format!("[{}, {}, {}]", x[0], x[1], x[2])
}

/// One panel of an experiment list: name, origin (mm), fast, slow.
struct Panel {
    origin: [f64; 3],
    fast: [f64; 3],
    slow: [f64; 3],
}

/// An experiment list: beam direction (towards the source), wavelength,
/// polarization normal and fraction, panels (all `fp` x `sp` pixels of
/// `pixel` mm, sensor 0.32 mm with mu 3.9/mm when `sensor`), real-space
/// cell vectors.
#[allow(clippy::too_many_arguments)]
fn expt(
    direction: [f64; 3],
    lambda: f64,
    normal: [f64; 3],
    fraction: f64,
    panels: &[Panel],
    (fp, sp, pixel): (usize, usize, f64),
    sensor: bool,
    cell: Option<[[f64; 3]; 3]>,
) -> String {
    let mut list = String::new();
    for (k, p) in panels.iter().enumerate() {
        let comma = if k + 1 < panels.len() { "," } else { "" };
        let (t, mu) = if sensor { (0.32, 3.9) } else { (0.0, 0.0) };
        writeln!(
            list,
            r#"{{"name": "M{k}", "origin": {}, "fast_axis": {}, "slow_axis": {}, "pixel_size": [{pixel}, {pixel}], "image_size": [{fp}, {sp}], "thickness": {t}, "mu": {mu}}}{comma}"#,
            v(p.origin),
            v(p.fast),
            v(p.slow)
        )
        .unwrap();
    }
    let (crystal, crystals) = match cell {
        Some(c) => (
            r#", "crystal": 0"#.to_string(),
            format!(
                r#", "crystal": [{{"real_space_a": {}, "real_space_b": {}, "real_space_c": {}}}]"#,
                v(c[0]),
                v(c[1]),
                v(c[2])
            ),
        ),
        None => (String::new(), String::new()),
    };
    format!(
        r#"{{"__id__": "ExperimentList",
  "experiment": [{{"__id__": "Experiment", "beam": 0, "detector": 0{crystal}}}],
  "beam": [{{"direction": {}, "wavelength": {lambda}, "polarization_normal": {}, "polarization_fraction": {fraction}}}],
  "detector": [{{"panels": [{list}]}}]{crystals}}}"#,
        v(direction),
        v(normal),
    )
}

/// Max |a - b| over max |b|.
fn rel_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    let max = b.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max) / max
}

#[test]
fn single_panel_expt_gives_the_golden_image() {
    let case = cases().iter().find(|c| c.id == "conv-mosflm-128").expect("golden case");
    let args: Vec<String> = case.argv().iter().map(|s| s.to_string()).collect();
    let inv = nanobragg_pipeline::parse_args(&args).unwrap();
    let (plan, _) = inv.plan().unwrap();
    let d = &plan.detector;
    // the crystal as -cell, -misset and -phi 12 leave it, the panel where the
    // MOSFLM beam centre puts it, the beam along +x polarized along z (Kahn 0.9)
    let c = plan.cells_m[0].map(|x| x * 1e10);
    let cell = [[c[0], c[1], c[2]], [c[3], c[4], c[5]], [c[6], c[7], c[8]]];
    let panel = Panel { origin: d.pix0.map(|x| x * 1e3), fast: d.fdet, slow: d.sdet };
    let text = expt(
        [-1.0, 0.0, 0.0],
        1.0,
        [0.0, 1.0, 0.0],
        0.95,
        &[panel],
        (d.fpixels, d.spixels, d.pixel_size_m * 1e3),
        false,
        Some(cell),
    );
    let dir = scratch("expt", "golden");
    std::fs::write(dir.join("one.expt"), text).unwrap();
    ok(&dir, &words("-expt one.expt -default_F 100 -N 4 -floatfile float.bin"));
    let ours = float_file(&dir.join("float.bin"));
    let golden = common::f32_image(&case.golden_file("float.bin").unwrap());
    let golden: Vec<f64> = golden.iter().map(|&x| x as f64).collect();
    let rel = rel_diff(&ours, &golden);
    // the same experiment through other roundings (cell from vectors, pix0 from its projections)
    eprintln!("conv-mosflm-128 through -expt: max |Δ| / max = {rel:e}");
    assert!(rel < 1e-9, "max |Δ| / max = {rel:e}");
}

/// Eight 128 x 64 modules of 0.1 mm in two columns and four rows with gaps,
/// each tilted a little, about 100 mm from the sample (DIALS frame: the
/// beam along -z).
fn modules() -> Vec<Panel> {
    let mut panels = Vec::new();
    for row in 0..4 {
        for col in 0..2 {
            let k = (row * 2 + col) as f64;
            let (a, b) = (0.02 * (k - 3.5), 0.015 * (k - 4.0).abs());
            // fast along x turned by a about y, slow along -y turned by b about x
            let fast = [a.cos(), 0.0, a.sin()];
            let s0 = [0.0, -b.cos(), -b.sin()];
            // slow made perpendicular to fast
            let d = dot(s0, fast);
            let s = [s0[0] - d * fast[0], s0[1] - d * fast[1], s0[2] - d * fast[2]];
            let n = dot(s, s).sqrt();
            let slow = s.map(|x| x / n);
            let origin = [-13.5 + col as f64 * 13.5, 14.0 - row as f64 * 7.0, -100.0 - 0.5 * k];
            panels.push(Panel { origin, fast, slow });
        }
    }
    panels
}

#[test]
fn multi_panel_equals_single_panel_renders_of_each_panel() {
    let dir = scratch("expt", "multi");
    let cell = [[61.0, 3.0, -2.0], [-4.0, 70.0, 5.0], [6.0, -7.0, 83.0]];
    let (fp, sp, pixel) = (128, 64, 0.1);
    let panels = modules();
    let (lambda, fraction) = (1.3, 0.99);
    let text = expt(
        [0.0, 0.0, 1.0],
        lambda,
        [0.0, 1.0, 0.0],
        fraction,
        &panels,
        (fp, sp, pixel),
        true,
        Some(cell),
    );
    std::fs::write(dir.join("multi.expt"), text).unwrap();
    let common = "-default_F 100 -N 7 -oversample 2";
    let stdout = ok(&dir, &words(&format!("-expt multi.expt {common} -floatfile multi.bin")));
    assert_eq!(stdout.matches("panel M").count(), 16, "{stdout}");
    let multi = float_file(&dir.join("multi.bin"));
    assert_eq!(multi.len(), 8 * fp * sp);

    // the same panels through the flags: custom vectors, the closest point
    // and distance, the sample pivot (after -Xbeam, which picks the beam
    // pivot); the crystal as a -mat file (a* λ, ...)
    let vol = dot(cell[0], cross(cell[1], cell[2]));
    let stars = [cross(cell[1], cell[2]), cross(cell[2], cell[0]), cross(cell[0], cell[1])]
        .map(|x| x.map(|c| c / vol * lambda));
    let mut mat = String::new();
    // line i: the i-th components of a*, b*, c*
    let rows: [[f64; 3]; 3] = std::array::from_fn(|i| stars.map(|x| x[i]));
    for r in rows {
        writeln!(mat, "{} {} {}", r[0], r[1], r[2]).unwrap();
    }
    std::fs::write(dir.join("cell.mat"), mat).unwrap();
    let beam = [0.0, 0.0, -1.0];
    let e = cross([0.0, 1.0, 0.0], beam);
    let mut worst = 0.0f64;
    for (k, p) in panels.iter().enumerate() {
        let o = cross(p.fast, p.slow);
        let f = |x: [f64; 3]| format!("{} {} {}", x[0], x[1], x[2]);
        let args = format!(
            "{common} -fdet_vector {} -sdet_vector {} -odet_vector {} -beam_vector {} -polar_vector {} \
             -pix0_vector 0 0 0 -close_distance {} -Xbeam {} -Ybeam {} -pivot sample \
             -detpixels_f {fp} -detpixels_s {sp} -pixel {pixel} -detector_thick 320 -detector_abs {} \
             -mat cell.mat -lambda {lambda} -polar {} -floatfile one.bin",
            f(p.fast),
            f(p.slow),
            f(o),
            f(beam),
            f(e),
            dot(p.origin, o),
            -dot(p.origin, p.fast),
            -dot(p.origin, p.slow),
            1000.0 / 3.9,
            2.0 * fraction - 1.0,
        );
        ok(&dir, &words(&args));
        let one = float_file(&dir.join("one.bin"));
        let part = &multi[k * fp * sp..(k + 1) * fp * sp];
        assert!(one.iter().any(|&x| x > 0.0));
        worst = worst.max(rel_diff(part, &one));
    }
    eprintln!("eight panels against their flags: max |Δ| / max = {worst:e}");
    assert!(worst < 1e-12, "max |Δ| / max over the panels = {worst:e}");
}

#[test]
fn refusals() {
    let dir = scratch("expt", "refusals");
    let cell = [[61.0, 0.0, 0.0], [0.0, 70.0, 0.0], [0.0, 0.0, 83.0]];
    let panels = modules();
    let text = expt(
        [0.0, 0.0, 1.0],
        1.3,
        [0.0, 1.0, 0.0],
        0.5,
        &panels[..2],
        (32, 16, 0.1),
        false,
        Some(cell),
    );
    std::fs::write(dir.join("two.expt"), &text).unwrap();
    let e = err(&dir, &words("-expt two.expt -distance 90 -default_F 1"));
    assert!(e.contains("-distance after -expt"), "{e}");
    let e = err(&dir, &words("-expt two.expt -default_F 1 -cbffile x.cbf"));
    assert!(e.contains("-cbffile: not available with a multi-panel detector"), "{e}");
    assert!(!dir.join("x.cbf").exists());
    let e = err(&dir, &words("-expt two.expt -default_F 1 -detector_rotx 3"));
    assert!(e.contains("placed by its panels"), "{e}");
    std::fs::write(
        dir.join("bad.expt"),
        text.replace("\"image_size\": [32, 16]", "\"image_size\": [32]"),
    )
    .unwrap();
    let e = err(&dir, &words("-expt bad.expt -default_F 1"));
    assert!(e.contains("bad.expt") && e.contains("image_size"), "{e}");
    // derivatives and refinement take one panel
    let e = err(&dir, &words("-expt two.expt -default_F 1 -gradient distance"));
    assert!(e.contains("-gradient: not available"), "{e}");
}

#[test]
fn one_geometry_as_expt_and_as_geom_renders_the_same() {
    let dir = scratch("expt", "geom");
    let (fp, sp, pixel) = (128, 64, 0.1);
    let panels = modules();
    // an unpolarized beam along -z (what -geom sets), no crystal: the flags give it
    let text =
        expt([0.0, 0.0, 1.0], 1.3, [0.0, 1.0, 0.0], 0.5, &panels, (fp, sp, pixel), false, None);
    std::fs::write(dir.join("d.expt"), text).unwrap();
    // the same panels in CrystFEL's frame (x, y, z) = DIALS (-x, y, -z), in pixels
    let mut geom =
        format!("clen = 0.1\nres = {}\nphoton_energy = {} eV\n", 1000.0 / pixel, 12398.42 / 1.3);
    for (k, p) in panels.iter().enumerate() {
        let to = |x: [f64; 3]| [-x[0], x[1], -x[2]];
        let (o, f, s) = (to(p.origin), to(p.fast), to(p.slow));
        let axis = |x: [f64; 3]| format!("{:+}x {:+}y {:+}z", x[0], x[1], x[2]);
        writeln!(
            geom,
            "q{k}/min_fs = 0\nq{k}/max_fs = {}\nq{k}/min_ss = 0\nq{k}/max_ss = {}\n\
             q{k}/corner_x = {}\nq{k}/corner_y = {}\nq{k}/coffset = {}\nq{k}/fs = {}\nq{k}/ss = {}",
            fp - 1,
            sp - 1,
            o[0] / pixel,
            o[1] / pixel,
            o[2] / 1000.0 - 0.1,
            axis(f),
            axis(s)
        )
        .unwrap();
    }
    std::fs::write(dir.join("d.geom"), geom).unwrap();
    let rest = "-cell 61 70 83 88 91 89 -misset 5 10 15 -default_F 100 -N 7 -oversample 2";
    ok(&dir, &words(&format!("-expt d.expt {rest} -floatfile e.bin")));
    ok(&dir, &words(&format!("-geom d.geom {rest} -floatfile g.bin")));
    let (e, g) = (float_file(&dir.join("e.bin")), float_file(&dir.join("g.bin")));
    assert!(e.iter().any(|&x| x > 0.0));
    let rel = rel_diff(&g, &e);
    eprintln!("the same detector as .expt and .geom: max |Δ| / max = {rel:e}");
    assert!(rel < 1e-9, "max |Δ| / max = {rel:e}");
    // placement after -geom is refused as after -expt
    let e = err(&dir, &words(&format!("-geom d.geom {rest} -Xbeam 3")));
    assert!(e.contains("-Xbeam after -geom"), "{e}");
}
