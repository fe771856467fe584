//! `-expt`: a DIALS experiment list as the detector, beam and crystal.
//! A single-panel list written from a golden case's geometry gives that
//! case's image; a multi-panel detector equals, panel by panel, renders of
//! the custom-vector flags of each panel; placement flags after `-expt` and
//! a multi-panel miniCBF are refused.

mod common;

use common::{cases, float_file, rel_l2, scratch};
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
#[derive(Clone, Copy)]
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
    let stdout = ok(&dir, &words("-expt one.expt -default_F 100 -N 4 -floatfile float.bin"));
    // the file's frame is the DIALS frame: its origin is the panel's own
    let line = stdout.lines().find(|l| l.contains("dials origin=")).expect("dials origin line");
    let got: Vec<f64> =
        line.split('=').nth(1).unwrap().split_whitespace().map(|x| x.parse().unwrap()).collect();
    for (g, want) in got.iter().zip(panel.origin) {
        assert!((g - want).abs() <= 1e-5 * want.abs().max(1.0), "{line} vs {want}");
    }
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
    assert!(e.contains("-cbffile: miniCBF holds one panel"), "{e}");
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
}

/// `-printout`, `-psf` and `-batch` on two panels stacked in one image.
#[test]
fn printout_psf_and_batch_with_panels() {
    let dir = scratch("expt", "printout");
    let cell = [[61.0, 0.0, 0.0], [0.0, 70.0, 0.0], [0.0, 0.0, 83.0]];
    let text = expt(
        [0.0, 0.0, 1.0],
        1.3,
        [0.0, 1.0, 0.0],
        0.5,
        &modules()[..2],
        (32, 16, 0.1),
        false,
        Some(cell),
    );
    std::fs::write(dir.join("two.expt"), &text).unwrap();
    let base = "-expt two.expt -default_F 100 -N 3 -nopgm";
    // one pixel of the second panel, named in the whole image (32 x 32)
    let out = ok(&dir, &words(&format!("{base} -floatfile f.bin -printout -printout_pixel 5 20")));
    let image = float_file(&dir.join("f.bin"));
    let traced: Vec<&str> = out.lines().filter(|l| l.contains(": stol =")).collect();
    assert_eq!(traced.len(), 1, "{out}");
    assert!(traced[0].trim_start().starts_with("5   20 :"), "{}", traced[0]);
    let pixel: f64 = out
        .lines()
        .find_map(|l| l.strip_prefix("pixel"))
        .map(|v| v.trim().parse().unwrap())
        .unwrap();
    let want = image[20 * 32 + 5];
    assert!((pixel - want).abs() <= 1e-6 * want.abs().max(1e-30), "{pixel} against {want}");
    // every pixel of both panels
    let out = ok(&dir, &words(&format!("{base} -floatfile f.bin -printout")));
    assert_eq!(out.lines().filter(|l| l.contains(": stol =")).count(), 32 * 32);
    let o = run(&dir, &words(&format!("{base} -floatfile f.bin -printout -printout_pixel 40 3")));
    assert!(String::from_utf8_lossy(&o.stderr)
        .contains("is not on the detector (a 32 x 32 pixel image)"));

    // the PSF spreads light within each panel, reported per panel
    let psf = format!("{base} -floatfile f.bin -noisefile n.img -seed 4 -psf gauss -psf_fwhm 150");
    let out = ok(&dir, &words(&psf));
    assert!(out.contains("  panel M0:\n") && out.contains("  panel M1:\n"), "{out}");
    assert_eq!(out.matches("adding back").count() + out.matches("no photons").count(), 2);
    let noise = std::fs::read(dir.join("n.img")).unwrap();
    assert_eq!(noise.len() - 512, 32 * 32 * 2);

    // each shot of a batch is the run with its misset
    std::fs::write(dir.join("angles.txt"), "10 20 30\n-5 0 45\n").unwrap();
    let out = ok(&dir, &words(&format!("{base} -floatfile b.bin -batch angles.txt")));
    assert!(out.contains("rendered 2 shots"), "{out}");
    for (k, misset) in ["10 20 30", "-5 0 45"].iter().enumerate() {
        ok(&dir, &words(&format!("{base} -floatfile one.bin -misset {misset}")));
        let shot = std::fs::read(dir.join(format!("b_{:05}.bin", k + 1))).unwrap();
        assert_eq!(shot, std::fs::read(dir.join("one.bin")).unwrap(), "shot {}", k + 1);
    }
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
    std::fs::write(dir.join("d.geom"), &geom).unwrap();
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
    // a key CrystFEL does not have is named, and the line skipped
    std::fs::write(dir.join("typo.geom"), format!("{geom}q0/coner_x = 5\n")).unwrap();
    let out = run(&dir, &words(&format!("-geom typo.geom {rest} -floatfile t.bin")));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && said.contains("'coner_x' is not a CrystFEL geometry key"),
        "{said}"
    );
    assert_eq!(float_file(&dir.join("t.bin")), g);
}

/// Rotation of `v` by `deg` degrees about lab x (right-handed).
fn rot_x(v: [f64; 3], deg: f64) -> [f64; 3] {
    let (s, c) = deg.to_radians().sin_cos();
    [v[0], c * v[1] - s * v[2], s * v[1] + c * v[2]]
}

#[test]
fn multi_panel_derivatives_are_each_panels_own() {
    let dir = scratch("expt", "gradient");
    let (fp, sp, pixel) = (64, 32, 0.1);
    let modules = modules();
    let write = |name: &str, panels: &[Panel]| {
        let text =
            expt([0.0, 0.0, 1.0], 1.3, [0.0, 1.0, 0.0], 0.5, panels, (fp, sp, pixel), false, None);
        std::fs::write(dir.join(name), text).unwrap();
    };
    write("d.expt", &modules);
    let rest = "-cell 61 70 83 88 91 89 -misset 5 10 15 -default_F 100 -N 7 -oversample 1 -exact";
    let params = "close_distance,Xbeam,Ybeam,detector_rotx,cell_a,misset_z";
    let stdout = ok(
        &dir,
        &words(&format!("-expt d.expt {rest} -floatfile f.bin -gradient {params} -gradfile g")),
    );
    assert!(stdout.contains("g_close_distance.bin"), "{stdout}");
    let n = fp * sp;
    let grad = |name: &str| float_file(&dir.join(format!("g_{name}.bin")));
    for name in params.split(',') {
        assert_eq!(grad(name).len(), 8 * n, "{name}");
    }
    // distance does not place a panel
    let e = err(&dir, &words(&format!("-expt d.expt {rest} -gradient distance")));
    assert!(e.contains("use close_distance"), "{e}");

    // panel 3 moved (along its normal, against its fast axis, about lab x):
    // its rows change as its derivatives say, no other panel's
    let k = 3;
    let p = &modules[k];
    let mut o = cross(p.fast, p.slow);
    if dot(o, [0.0, 0.0, -1.0]) < 0.0 {
        o = o.map(|x| -x);
    }
    // panel k moved by h of parameter `name`
    let move_panel = |name: &str, h: f64| {
        let shift = |d: [f64; 3]| [p.origin[0] + d[0], p.origin[1] + d[1], p.origin[2] + d[2]];
        match name {
            "close_distance" => Panel { origin: shift(o.map(|x| x * h)), ..*p },
            "Xbeam" => Panel { origin: shift(p.fast.map(|x| -x * h)), ..*p },
            _ => {
                Panel { origin: rot_x(p.origin, h), fast: rot_x(p.fast, h), slow: rot_x(p.slow, h) }
            }
        }
    };
    let moved = |name: &str, h: f64, file: &str| {
        let mut panels = modules.clone();
        panels[k] = move_panel(name, h);
        write("m.expt", &panels);
        ok(&dir, &words(&format!("-expt m.expt {rest} -floatfile {file}")));
        float_file(&dir.join(file))
    };
    let base = float_file(&dir.join("f.bin"));
    // (mm, mm, degrees)
    let cases = [("close_distance", 0.01), ("Xbeam", 0.002), ("detector_rotx", 0.002)];
    for (name, h) in cases {
        let up = moved(name, h, "up.bin");
        let down = moved(name, -h, "down.bin");
        let panel = k * n..(k + 1) * n;
        let others = |img: &[f64]| {
            img.iter()
                .enumerate()
                .filter(|(i, _)| !panel.contains(i))
                .map(|(_, &v)| v)
                .collect::<Vec<_>>()
        };
        assert_eq!(others(&up), others(&base), "{name}: another panel changed");
        let fd: Vec<f64> = up[panel.clone()]
            .iter()
            .zip(&down[panel.clone()])
            .map(|(u, d)| (u - d) / (2.0 * h))
            .collect();
        let g = grad(name);
        let err = rel_l2(&g[panel.clone()], &fd);
        eprintln!("panel {k} {name}: relative L2 error against central differences {err:e}");
        assert!(err < 1e-3, "{name}: relative L2 error {err:e}");
        assert!(others(&g).iter().all(|&v| v.is_finite()));
    }
    // a crystal parameter moves every panel's pixels
    let h = 0.005;
    let cell = |a: f64, file: &str| {
        let args = rest.replace("-cell 61 ", &format!("-cell {a} "));
        ok(&dir, &words(&format!("-expt d.expt {args} -floatfile {file}")));
        float_file(&dir.join(file))
    };
    let (up, down) = (cell(61.0 + h, "up.bin"), cell(61.0 - h, "down.bin"));
    let fd: Vec<f64> = up.iter().zip(&down).map(|(u, d)| (u - d) / (2.0 * h)).collect();
    let err = rel_l2(&grad("cell_a"), &fd);
    eprintln!("cell_a over the eight panels: relative L2 error {err:e}");
    assert!(err < 1e-3, "cell_a: relative L2 error {err:e}");
    for k in 0..8 {
        assert!(fd[k * n..(k + 1) * n].iter().any(|&v| v != 0.0), "panel {k}: no spot");
    }
}

/// An SMV file of unsigned shorts, `fp` x `sp`, as a `-mask`.
fn smv_mask(path: &Path, fp: usize, sp: usize, pixels: &[u16]) {
    let mut head = format!(
        "{{\nHEADER_BYTES=512;\nDIM=2;\nBYTE_ORDER=little_endian;\nTYPE=unsigned_short;\nSIZE1={fp};\nSIZE2={sp};\n}}\n"
    )
    .into_bytes();
    head.resize(512, b' ');
    head.extend(pixels.iter().flat_map(|v| v.to_le_bytes()));
    std::fs::write(path, head).unwrap();
}

#[test]
fn roi_and_mask_cover_the_stacked_panels() {
    let dir = scratch("expt", "roi");
    let (fp, sp, pixel) = (64, 32, 0.1);
    let text =
        expt([0.0, 0.0, 1.0], 1.3, [0.0, 1.0, 0.0], 0.5, &modules(), (fp, sp, pixel), false, None);
    std::fs::write(dir.join("d.expt"), text).unwrap();
    let rows = 8 * sp;
    let rest = "-cell 61 70 83 88 91 89 -misset 5 10 15 -default_F 100 -N 7 -oversample 1";
    ok(&dir, &words(&format!("-expt d.expt {rest} -floatfile all.bin")));
    // a mask of every third pixel off; an ROI across panels 2 to 4
    let mask: Vec<u16> = (0..fp * rows).map(|i| (i % 3 != 0) as u16).collect();
    smv_mask(&dir.join("m.img"), fp, rows, &mask);
    let (x0, x1, y0, y1) = (5, 50, 2 * sp - 7, 4 * sp + 3);
    let stdout = ok(
        &dir,
        &words(&format!(
            "-expt d.expt {rest} -mask m.img -roi {x0} {x1} {y0} {y1} -floatfile part.bin"
        )),
    );
    let (all, part) = (float_file(&dir.join("all.bin")), float_file(&dir.join("part.bin")));
    assert_eq!(part.len(), fp * rows);
    let mut inside = 0;
    for (i, (&a, &p)) in all.iter().zip(&part).enumerate() {
        let (f, s) = (i % fp, i / fp);
        let rendered = mask[i] != 0 && (x0..=x1).contains(&f) && (y0..=y1).contains(&s);
        if rendered {
            inside += (a > 0.0) as usize;
            assert_eq!(a, p, "pixel {f} {s}");
        } else {
            assert_eq!(p, 0.0, "pixel {f} {s} outside the ROI or masked");
        }
    }
    assert!(inside > 100, "{inside} lit pixels inside");
    // the statistics over the rendered pixels only
    let n = part.iter().enumerate().filter(|(i, _)| {
        let (f, s) = (i % fp, i / fp);
        mask[*i] != 0 && (x0..=x1).contains(&f) && (y0..=y1).contains(&s)
    });
    let (count, sum) = n.fold((0usize, 0.0f64), |(c, t), (_, &v)| (c + 1, t + v as f32 as f64));
    let mean = stdout.lines().find(|l| l.starts_with("mean=")).unwrap();
    let got: f64 = mean.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(
        (got - sum / count as f64).abs() <= 1e-5 * got.abs(),
        "{mean} vs {}",
        sum / count as f64
    );
    // a mask of another size is refused
    smv_mask(&dir.join("small.img"), fp, sp, &mask[..fp * sp]);
    let e = err(&dir, &words(&format!("-expt d.expt {rest} -mask small.img")));
    assert!(e.contains("must cover the image of its panels: 64 x 256 pixels"), "{e}");
}

#[test]
fn geom_data_layout_places_the_panels() {
    let dir = scratch("expt", "layout");
    // four panels of three sizes in a 64 x 46 data array, a gap at the end
    // (name, min_fs, min_ss, fpixels, spixels, corner_x, corner_y)
    let panels = [
        ("a", 0, 0, 40, 16, -45.0, -30.0),
        ("b", 40, 0, 24, 16, 0.0, -30.0),
        ("c", 0, 16, 64, 20, -40.0, -10.0),
        ("d", 0, 36, 30, 10, -20.0, 15.0),
    ];
    let (width, height) = (64, 46);
    let entry = |(n, x, y, f, s, cx, cy): (&str, usize, usize, usize, usize, f64, f64), k: f64| {
        let a: f64 = 0.03 * (k - 1.5);
        format!(
            "{n}/min_fs = {x}\n{n}/max_fs = {}\n{n}/min_ss = {y}\n{n}/max_ss = {}\n\
             {n}/corner_x = {cx}\n{n}/corner_y = {cy}\n{n}/coffset = {}\n\
             {n}/fs = {:+}x +0y {:+}z\n{n}/ss = +0x +1y +0z\n",
            x + f - 1,
            y + s - 1,
            0.0003 * k,
            a.cos(),
            a.sin()
        )
    };
    let head = "clen = 0.07\nres = 10000\nphoton_energy = 9500 eV\n";
    let mut geom = head.to_string();
    for (k, p) in panels.iter().enumerate() {
        geom += &entry(*p, k as f64);
    }
    std::fs::write(dir.join("l.geom"), geom).unwrap();
    let rest = "-cell 41 47 53 84 93 97 -misset 5 -10 20 -default_F 100 -N 5 -oversample 2";
    let stdout = ok(
        &dir,
        &words(&format!(
            "-geom l.geom {rest} -floatfile all.bin -gradient close_distance,cell_b -gradfile g"
        )),
    );
    let all = float_file(&dir.join("all.bin"));
    assert_eq!(all.len(), width * height);
    let g_close = float_file(&dir.join("g_close_distance.bin"));
    let mut covered = vec![false; width * height];
    for (k, &(n, x, y, f, s, cx, cy)) in panels.iter().enumerate() {
        // the panel alone, at the start of its own data array
        let one = head.to_string() + &entry((n, 0, 0, f, s, cx, cy), k as f64);
        std::fs::write(dir.join("one.geom"), one).unwrap();
        ok(
            &dir,
            &words(&format!(
                "-geom one.geom {rest} -floatfile one.bin -gradient close_distance -gradfile o"
            )),
        );
        let alone = float_file(&dir.join("one.bin"));
        let d_alone = float_file(&dir.join("o_close_distance.bin"));
        assert!(alone.iter().any(|&v| v > 0.0), "panel {n}: no signal");
        for row in 0..s {
            for col in 0..f {
                let at = (y + row) * width + x + col;
                covered[at] = true;
                assert_eq!(all[at], alone[row * f + col], "panel {n} pixel {col} {row}");
                assert_eq!(g_close[at], d_alone[row * f + col], "panel {n} derivative");
            }
        }
    }
    // the gap holds no signal and no pixel of the statistics
    let gap: Vec<usize> = (0..width * height).filter(|&i| !covered[i]).collect();
    assert_eq!(gap.len(), 34 * 10);
    assert!(gap.iter().all(|&i| all[i] == 0.0 && g_close[i] == 0.0));
    let mean: f64 = (0..width * height).filter(|&i| covered[i]).map(|i| all[i]).sum::<f64>()
        / (width * height - gap.len()) as f64;
    let line = stdout.lines().find(|l| l.starts_with("mean=")).unwrap();
    let got: f64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!((got - mean).abs() <= 1e-5 * mean, "{line} vs {mean}");
    // panels in one place of the data array are stacked, which needs one width
    let mut twice = head.to_string();
    twice += &entry(panels[0], 0.0);
    twice += &entry(("e", 30, 10, 20, 10, 5.0, 5.0), 1.0);
    std::fs::write(dir.join("twice.geom"), twice).unwrap();
    let e = err(&dir, &words(&format!("-geom twice.geom {rest}")));
    assert!(e.contains("-geom twice.geom: panels a and e overlap in the data array"), "{e}");
    assert!(e.contains("panel e is 20 pixels wide, panel a 40"), "{e}");
}

/// An experiment list of several experiments (dials.stills_process) renders
/// one shot per experiment, numbered as `-batch` numbers them: shot k is
/// the list of experiment k alone with the noise seed `-seed` + k.
#[test]
fn each_experiment_of_a_list_is_a_shot() {
    let dir = scratch("expt", "list");
    let beam = |lambda: f64| {
        format!(
            r#"{{"direction": [0.0, 0.0, 1.0], "wavelength": {lambda},
             "polarization_normal": [0.0, 1.0, 0.0], "polarization_fraction": 0.999}}"#
        )
    };
    let crystals = [
        "[70.0, 0.0, 0.0], \"real_space_b\": [0.0, 80.0, 0.0], \"real_space_c\": [0.0, 0.0, 90.0]",
        "[0.0, 70.0, 0.0], \"real_space_b\": [-80.0, 0.0, 0.0], \"real_space_c\": [0.0, 0.0, 90.0]",
        "[70.0, 0.0, 0.0], \"real_space_b\": [0.0, 0.0, 80.0], \"real_space_c\": [0.0, -90.0, 0.0]",
    ];
    let list = |experiments: &[(usize, usize)]| {
        let e: Vec<String> = experiments
            .iter()
            .map(|(b, c)| format!(r#"{{"beam": {b}, "detector": 0, "crystal": {c}}}"#))
            .collect();
        let c: Vec<String> =
            crystals.iter().map(|c| format!(r#"{{"real_space_a": {c}}}"#)).collect();
        format!(
            r#"{{"__id__": "ExperimentList", "experiment": [{}],
             "beam": [{}, {}],
             "detector": [{{"panels": [{{"name": "p", "origin": [-4.8, 4.8, -100.0],
               "fast_axis": [1.0, 0.0, 0.0], "slow_axis": [0.0, -1.0, 0.0],
               "pixel_size": [0.15, 0.15], "image_size": [64, 64]}}]}}],
             "crystal": [{}]}}"#,
            e.join(", "),
            beam(1.0),
            beam(1.1),
            c.join(", ")
        )
    };
    let shots = [(0, 0), (1, 1), (0, 2)];
    std::fs::write(dir.join("all.expt"), list(&shots)).unwrap();
    let model = words("-default_F 100 -N 4 -seed 3");
    let with = |extra: &str| [model.clone(), words(extra)].concat();
    let out = ok(&dir, &with("-expt all.expt -floatfile f.bin -noisefile n.img -nxmxfile s.nxs"));
    assert!(out.contains("shot 2: experiment 1, 1.1 Å"), "{out}");
    let mut images = Vec::new();
    for (k, &shot) in shots.iter().enumerate() {
        std::fs::write(dir.join("one.expt"), list(&[shot])).unwrap();
        let seed = format!("-seed {}", 3 + k);
        ok(&dir, &with(&format!("-expt one.expt {seed} -floatfile a.bin -noisefile a.img")));
        for (numbered, alone) in [("f", "a.bin"), ("n", "a.img")] {
            let ext = alone.split('.').nth(1).unwrap();
            let name = format!("{numbered}_{:05}.{ext}", k + 1);
            let shot = std::fs::read(dir.join(&name)).unwrap();
            assert!(shot == std::fs::read(dir.join(alone)).unwrap(), "{name}");
        }
        let nxmx =
            nanobragg_io::read_image::read_image(&dir.join(format!("s_{:05}.nxs", k + 1)), 0);
        assert_eq!(nxmx.unwrap().fpixels, 64);
        images.push(float_file(&dir.join("a.bin")));
    }
    assert!(images[0] != images[1] && images[0] != images[2], "the shots are not each its own");
    for (extra, refused) in [("-images 2", "-images"), ("-printout", "-printout")] {
        let e = err(&dir, &with(&format!("-expt all.expt {extra}")));
        assert!(e.contains(refused) && e.contains("3 experiments"), "{e}");
    }
    let e = err(
        &dir,
        &[words("refine -observed a.bin -refine distance -expt all.expt"), model].concat(),
    );
    assert!(e.contains("holds 3 experiments"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}
