//! The CUDA kernel, built for the CPU (nanobragg-cuda's `host-kernel`
//! feature: the generated declarations and kernel.cu compiled by the system
//! C++ compiler), against the CPU's exact path on every parity plan: the f64
//! kernel bit for bit (image, solid-angle sum, fallback point), the f32
//! kernel within the GPU parity tolerances. Needs a C++ compiler, no GPU.

mod parity;

use nanobragg_core::render::{render, Precision, RenderOptions};
use parity::{check, plan, CASES};

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn host_kernel_matches_render_exact_on_every_parity_plan() {
    let opts = RenderOptions::default();
    for (name, args) in CASES {
        let p = plan(name, args);
        let cpu = render::<f32>(&p, RenderOptions { precision: Precision::Exact64, ..opts });
        assert!(cpu.image.iter().any(|&v| v > 0.0), "{name}: empty image");
        let f64_kernel = nanobragg_cuda::host::render(&p, Precision::Exact64)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        check(name, Precision::Exact64, &f64_kernel, &cpu);
        assert!(bits(&f64_kernel.image) == bits(&cpu.image), "{name}: f64 image not bit-identical");
        assert_eq!(
            f64_kernel.info.omega_sum.to_bits(),
            cpu.info.omega_sum.to_bits(),
            "{name}: omega_sum"
        );
        assert_eq!(
            f64_kernel.info.interpolation_fallback, cpu.info.interpolation_fallback,
            "{name}"
        );
        let f32_kernel = nanobragg_cuda::host::render(&p, Precision::Fast32)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        check(name, Precision::Fast32, &f32_kernel, &cpu);
    }
}

/// The plans of a GPU batch's rotated shots (`Plan::rotated`, which
/// `Shot::rotated` packs): the kernel's inputs (the cells, the reciprocal
/// vectors of Gaussian spots) and the CPU kernel's leaves turn together. The
/// CPU counterpart of gpu_parity's batch test.
#[test]
fn host_kernel_matches_render_exact_on_rotated_plans() {
    let opts = RenderOptions::default();
    let rot = |t: f64| {
        let (c, s) = (t.cos(), t.sin());
        [c, 0.0, s, 0.0, 1.0, 0.0, -s, 0.0, c]
    };
    for name in ["triclinic-misset", "mosaic-nabc", "gauss-fudge"] {
        let (_, args) = CASES.iter().find(|(n, _)| *n == name).expect("a parity case");
        let p = plan(name, args);
        let unturned =
            render::<f32>(&p, RenderOptions { precision: Precision::Exact64, ..opts }).image;
        for t in [0.05, -0.3] {
            let q = p.rotated(&rot(t));
            let cpu = render::<f32>(&q, RenderOptions { precision: Precision::Exact64, ..opts });
            let peak = cpu.image.iter().fold(0.0f32, |m, &v| m.max(v));
            let moved = cpu.image.iter().zip(&unturned).any(|(a, b)| (a - b).abs() > 1e-3 * peak);
            assert!(moved, "{name} turned by {t}: the image did not change");
            let kernel = nanobragg_cuda::host::render(&q, Precision::Exact64)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(
                bits(&kernel.image) == bits(&cpu.image),
                "{name} turned by {t}: not bit-identical"
            );
        }
    }
}

/// Phi steps from exactly 0: nanoBragg.c's first sweep starts unrotated in
/// the first pixel, which the kernel does not render and every backend puts
/// in afterwards (as `Cuda` does on a GPU; the CPU counterpart of
/// gpu_parity's `the_first_phi_sweep_is_put_in`).
const PHI_FROM_ZERO: &str = "-default_F 100 -cell 70 80 90 75 85 95 -misset 10 20 30 -lambda 1.5 \
     -N 7 -distance 120 -detpixels 64 -polar 0.9 -phi 0 -osc 0.5 -phisteps 3";

#[test]
fn the_host_backend_puts_the_first_phi_sweep_in() {
    use nanobragg_core::render::Backend;
    let p = plan("phi-from-zero", PHI_FROM_ZERO);
    assert!(p.first_sweep_cells.is_some());
    let cpu = render::<f32>(&p, RenderOptions::new(Precision::Exact64));
    let raw = nanobragg_cuda::host::render(&p, Precision::Exact64).expect("render");
    assert!(bits(&raw.image) != bits(&cpu.image), "the kernel alone renders the first sweep");
    let mut image = vec![0.0f32; cpu.image.len()];
    nanobragg_cuda::host::HostKernel
        .render_into(&p, Precision::Exact64, &mut image)
        .expect("render");
    assert!(bits(&image) == bits(&cpu.image), "not bit-identical");
}

#[test]
fn fast64_runs_the_f64_kernel() {
    let (name, args) = CASES[0];
    let p = plan(name, args);
    let exact = nanobragg_cuda::host::render(&p, Precision::Exact64).expect("render");
    let fast = nanobragg_cuda::host::render(&p, Precision::Fast64).expect("render");
    assert_eq!(bits(&exact.image), bits(&fast.image));
}

#[test]
fn fractional_n_reduces_the_index() {
    // N = 4.5 and 5: with the reduced index, spots keep their place and grow
    // with N; the old formula (sin(pi N h) / sin(pi h)) had a pole at every
    // whole h instead
    let p45 = plan("n45", "-default_F 100 -cell 100 100 100 90 90 90 -N 4.5 -lambda 1.0 -distance 100 -detpixels 64 -pixel 0.1");
    let p5 = plan("n5", "-default_F 100 -cell 100 100 100 90 90 90 -N 5 -lambda 1.0 -distance 100 -detpixels 64 -pixel 0.1");
    let a = nanobragg_cuda::host::render(&p45, Precision::Exact64).expect("render").image;
    let b = nanobragg_cuda::host::render(&p5, Precision::Exact64).expect("render").image;
    let (ma, mb) = (a.iter().cloned().fold(0.0, f32::max), b.iter().cloned().fold(0.0, f32::max));
    assert!(ma > 0.0 && ma < mb, "max at N=4.5 {ma}, at N=5 {mb}");
    let argmax = |v: &[f32], m: f32| v.iter().position(|&x| x == m);
    assert_eq!(argmax(&a, ma), argmax(&b, mb));
}

#[test]
fn host_kernel_renders_every_panel_of_a_multi_panel_detector() {
    // four tilted 32 x 16 modules with gaps (CrystFEL file), a triclinic cell
    let mut geom = String::from("clen = 0.08\nres = 10000\nphoton_energy = 9000 eV\n");
    for k in 0..4 {
        let a = 0.04 * (k as f64 - 1.5);
        let (fs, ss) = ([a.cos(), 0.0, a.sin()], [0.0, 1.0, 0.0]);
        geom += &format!(
            "p{k}/min_fs = 0\np{k}/max_fs = 31\np{k}/min_ss = 0\np{k}/max_ss = 15\n\
             p{k}/corner_x = {}\np{k}/corner_y = {}\np{k}/coffset = {}\n\
             p{k}/fs = {:+}x {:+}y {:+}z\np{k}/ss = {:+}x {:+}y {:+}z\n",
            -34.0 + 36.0 * (k % 2) as f64,
            -18.0 + 18.0 * (k / 2) as f64,
            0.0005 * k as f64,
            fs[0],
            fs[1],
            fs[2],
            ss[0],
            ss[1],
            ss[2]
        );
    }
    let dir = std::env::temp_dir().join(format!("nb-host-panels-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("four.geom");
    std::fs::write(&path, geom).unwrap();
    let args = format!(
        "-geom {} -cell 41 47 53 84 93 97 -misset 5 -10 20 -default_F 100 -N 5 -oversample 2",
        path.display()
    );
    let list: Vec<String> = args.split_whitespace().map(String::from).collect();
    let inv = nanobragg_pipeline::parse_args(&list).expect("parse");
    assert_eq!(inv.config.detector.panels.len(), 4);
    let configs = nanobragg_core::geometry::panel_configs(&inv.config).expect("panels");
    let seeds = nanobragg_core::setup::SetupSeeds { misset_idum: -1 };
    for (k, c) in configs.iter().enumerate() {
        let p = nanobragg_core::setup::Plan::new(c, seeds).expect("plan");
        let cpu = render::<f32>(&p, RenderOptions::new(Precision::Exact64));
        assert!(cpu.image.iter().any(|&v| v > 0.0), "panel {k}: empty");
        let kernel = nanobragg_cuda::host::render(&p, Precision::Exact64).expect("render");
        assert!(bits(&kernel.image) == bits(&cpu.image), "panel {k}: not bit-identical");
        assert_eq!(kernel.info.omega_sum.to_bits(), cpu.info.omega_sum.to_bits(), "panel {k}");
    }
    std::fs::remove_dir_all(&dir).ok();
}
