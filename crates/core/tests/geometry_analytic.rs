//! Analytic checks of the detector geometry and the per-pixel scale factors:
//! beam-centre mapping per convention, pivots and the distance update, solid
//! angle with and without `-point_pixel`, and normalisation by the step count.

use nanobragg_core::config::{Convention, DetectorConfig, Pivot, SimConfig};
use nanobragg_core::geometry::Detector;
use nanobragg_core::render::{render, Precision, RenderOptions};
use nanobragg_core::setup::{Plan, SetupSeeds};

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol * (1.0 + b.abs())
}

fn det(convention: Convention, f: impl FnOnce(&mut DetectorConfig)) -> Detector {
    let mut cfg = DetectorConfig {
        convention,
        fpixels: 100,
        spixels: 80,
        pixel_mm: 0.1,
        distance_mm: 100.0,
        ..Default::default()
    };
    f(&mut cfg);
    Detector::resolve(&cfg).unwrap()
}

/// Where the direct beam meets the detector plane, in (fast, slow) metres from
/// the corner of the first pixel.
fn beam_spot(d: &Detector) -> (f64, f64) {
    let dot = |a: [f64; 3], b: [f64; 3]| a[0] * b[0] + a[1] * b[1] + a[2] * b[2];
    let t = dot(d.pix0, d.odet) / dot(d.beam, d.odet);
    let hit = [t * d.beam[0] - d.pix0[0], t * d.beam[1] - d.pix0[1], t * d.beam[2] - d.pix0[2]];
    (dot(hit, d.fdet), dot(hit, d.sdet))
}

#[test]
fn mosflm_beam_centre_is_swapped_and_shifted_half_a_pixel() {
    // MOSFLM: Xbeam is along slow, Ybeam along fast, plus half a pixel
    let d = det(Convention::Mosflm, |c| {
        c.xbeam_mm = Some(3.0);
        c.ybeam_mm = Some(4.0);
    });
    let (f, s) = beam_spot(&d);
    assert!(close(f, 4.0e-3 + 0.05e-3, 1e-12), "{f}");
    assert!(close(s, 3.0e-3 + 0.05e-3, 1e-12), "{s}");
    assert_eq!(d.beam, [1.0, 0.0, 0.0]);
    assert_eq!(d.pivot, Pivot::Beam);
    // default centre: middle of the detector (+ half a pixel)
    let d = det(Convention::Mosflm, |_| {});
    assert!(close(d.xbeam_m, (8.0e-3 + 0.1e-3) / 2.0, 1e-12));
    assert!(close(d.ybeam_m, (10.0e-3 + 0.1e-3) / 2.0, 1e-12));
}

#[test]
fn denzo_has_no_half_pixel_shift() {
    let d = det(Convention::Denzo, |c| {
        c.xbeam_mm = Some(3.0);
        c.ybeam_mm = Some(4.0);
    });
    let (f, s) = beam_spot(&d);
    assert!(close(f, 4.0e-3, 1e-12) && close(s, 3.0e-3, 1e-12), "{f} {s}");
}

#[test]
fn adxv_measures_slow_from_the_far_edge() {
    let d = det(Convention::Adxv, |c| {
        c.xbeam_mm = Some(3.0);
        c.ybeam_mm = Some(2.0);
    });
    let (f, s) = beam_spot(&d);
    assert!(close(f, 3.0e-3, 1e-12), "{f}");
    assert!(close(s, 8.0e-3 - 2.0e-3, 1e-12), "{s}");
    assert_eq!(d.beam, [0.0, 0.0, 1.0]);
}

#[test]
fn xds_orgx_orgy_give_the_closest_point() {
    let d = det(Convention::Xds, |c| {
        c.orgx_px = Some(40.5);
        c.orgy_px = Some(30.5);
        c.close_distance_mm = Some(90.0);
    });
    assert_eq!(d.pivot, Pivot::Sample);
    // ORG is in pixel-centre units: (ORG - 0.5) pixels from the corner
    assert!(close(d.fclose_m, 40.0 * 0.1e-3, 1e-12), "{}", d.fclose_m);
    assert!(close(d.sclose_m, 30.0 * 0.1e-3, 1e-12), "{}", d.sclose_m);
    assert!(close(d.orgx, 40.5, 1e-9) && close(d.orgy, 30.5, 1e-9));
    assert!(close(d.close_distance_m, 0.09, 1e-12));
    // untilted: the beam hits the closest point
    let (f, s) = beam_spot(&d);
    assert!(close(f, d.fclose_m, 1e-12) && close(s, d.sclose_m, 1e-12));
}

#[test]
fn beam_pivot_keeps_the_beam_spot_and_updates_distance() {
    // tilting about the beam spot: the spot stays, the distance along the beam
    // stays, and the closest distance becomes distance * cos(tilt)
    let tilt = 20.0f64;
    let d = det(Convention::Mosflm, |c| {
        c.xbeam_mm = Some(3.0);
        c.ybeam_mm = Some(4.0);
        c.roty_deg = tilt;
    });
    let (f, s) = beam_spot(&d);
    assert!(close(f, 4.05e-3, 1e-12) && close(s, 3.05e-3, 1e-12), "{f} {s}");
    assert!(close(d.distance_m, 0.1, 1e-12), "{}", d.distance_m);
    assert!(close(d.close_distance_m, 0.1 * tilt.to_radians().cos(), 1e-12));
}

#[test]
fn sample_pivot_keeps_the_closest_distance_and_the_r_factor_updates_distance() {
    // -distance with a sample pivot: close_distance = |ratio * distance| where
    // ratio = beam . rotated normal, then distance = close_distance / ratio
    let tilt = 10.0f64;
    let d = det(Convention::Dials, |c| {
        c.rotx_deg = tilt;
        c.distance_mm = 110.0;
    });
    let ratio = tilt.to_radians().cos();
    assert!(close(d.close_distance_m, 0.110 * ratio, 1e-12), "{}", d.close_distance_m);
    assert!(close(d.distance_m, d.close_distance_m / ratio, 1e-12));
    // the closest point stays where it was before the rotation
    let u = det(Convention::Dials, |c| c.distance_mm = 110.0);
    assert!(close(d.fclose_m, u.fclose_m, 1e-9) && close(d.sclose_m, u.sclose_m, 1e-9));
}

fn plan(f: impl FnOnce(&mut SimConfig)) -> Plan {
    let mut cfg = SimConfig::default();
    cfg.sf.default_f = 100.0;
    cfg.crystal.cell = Some([100.0, 100.0, 100.0, 90.0, 90.0, 90.0]);
    cfg.detector.fpixels = 33;
    cfg.detector.spixels = 33;
    cfg.detector.distance_mm = 50.0;
    cfg.sampling.oversample = 1;
    f(&mut cfg);
    Plan::new(&cfg, SetupSeeds { misset_idum: -1 }).unwrap()
}

#[test]
fn solid_angle_with_and_without_point_pixel() {
    // N = 1, no polarization: the image is fluence * r_e^2 * F^2 * 0.5(1+cos^2 2θ) * omega
    let p = plan(|c| c.beam.nopolar = true);
    let img = render::<f32>(&p, RenderOptions::new(Precision::Exact64)).image;
    let q = plan(|c| {
        c.beam.nopolar = true;
        c.detector.point_pixel = true;
    });
    let img_pp = render::<f32>(&q, RenderOptions::new(Precision::Exact64)).image;
    let d = &p.detector;
    let scale = nanobragg_core::units::R_E_SQR * p.fluence * 100.0 * 100.0;
    for (fp, sp) in [(16usize, 16usize), (0, 0), (30, 5)] {
        let f = (fp as f64 + 0.5) * d.pixel_size_m;
        let s = (sp as f64 + 0.5) * d.pixel_size_m;
        let pos: [f64; 3] = std::array::from_fn(|i| f * d.fdet[i] + s * d.sdet[i] + d.pix0[i]);
        let r = (pos[0] * pos[0] + pos[1] * pos[1] + pos[2] * pos[2]).sqrt();
        let omega = d.pixel_size_m * d.pixel_size_m / (r * r) * d.close_distance_m / r;
        let v = img[sp * d.fpixels + fp] as f64;
        assert!(close(v, scale * omega, 2e-6), "pixel ({fp},{sp}): {v} vs {}", scale * omega);
        let v_pp = img_pp[sp * d.fpixels + fp] as f64;
        assert!(close(v_pp, scale / (r * r), 2e-6), "point pixel ({fp},{sp})");
    }
}

#[test]
fn intensity_is_normalised_by_the_number_of_steps() {
    // splitting the same physics into more samples must not change the scale:
    // N = 1 and a flat structure factor make every sample of a pixel equal
    // up to the small variation across the pixel
    let base = plan(|c| c.beam.nopolar = true);
    let one = render::<f32>(&base, RenderOptions::new(Precision::Exact64)).image;
    let more = plan(|c| {
        c.beam.nopolar = true;
        c.crystal.phisteps = 4;
        c.crystal.osc_deg = 0.0;
        c.crystal.mosaic_deg = 0.0;
    });
    assert_eq!(more.steps, base.steps * 4);
    let four = render::<f32>(&more, RenderOptions::new(Precision::Exact64)).image;
    for (a, b) in one.iter().zip(&four) {
        assert!(close(*a as f64, *b as f64, 1e-6), "{a} vs {b}");
    }
}
