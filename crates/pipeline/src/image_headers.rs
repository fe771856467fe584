//! The headers of a render's image files: the SMV header of a plan and the
//! int32 image (geometry, beam, sensor, the spectrum as rendered) that
//! NXmx and miniCBF files describe.

use crate::invocation::Outputs;
use nanobragg_core::geometry::Detector;
use nanobragg_core::noise_stream::NoiseStream;
use nanobragg_core::setup::Plan;
use nanobragg_io::mx::{utc_iso8601, MxImage, Panel};
use nanobragg_io::smv::{SmvHeader, SmvHeaderFields};

/// The SMV header of a render's integer images (nanoBragg.c's keys).
pub fn smv_header(plan: &Plan) -> SmvHeader {
    SmvHeader::from(&smv_fields(plan))
}

/// nanoBragg.c's SMV header values of `plan`'s image.
/// `header` of a noise image drawn from the parallel stream, with the lines
/// that record it (`NOISE_RNG`, `NOISE_SEED`: the user's seed).
pub fn parallel_noise_header(header: SmvHeader, seed: i64) -> SmvHeader {
    header.entry("NOISE_RNG", NoiseStream::Parallel.label()).entry("NOISE_SEED", seed)
}

fn smv_fields(plan: &Plan) -> SmvHeaderFields {
    let d = &plan.detector;
    SmvHeaderFields {
        fpixels: d.fpixels,
        spixels: d.spixels,
        pixel_size_mm: d.pixel_size_m * 1000.0,
        distance_mm: d.distance_m * 1000.0,
        wavelength_a: plan.sources.central_lambda_m * 1e10,
        beam_center_x_mm: d.xbeam_m * 1000.0,
        beam_center_y_mm: d.ybeam_m * 1000.0,
        adxv_center_x_mm: d.fbeam_m * 1000.0,
        adxv_center_y_mm: (d.detsize_s_m - d.sbeam_m) * 1000.0,
        mosflm_center_x_mm: (d.sbeam_m - 0.5 * d.pixel_size_m) * 1000.0,
        mosflm_center_y_mm: (d.fbeam_m - 0.5 * d.pixel_size_m) * 1000.0,
        denzo_x_beam_mm: (d.sbeam_m - 0.0 * d.pixel_size_m) * 1000.0,
        denzo_y_beam_mm: (d.fbeam_m - 0.0 * d.pixel_size_m) * 1000.0,
        dials_origin_mm: d.dials_origin_mm,
        xds_orgx: d.orgx,
        xds_orgy: d.orgy,
        close_distance_mm: d.close_distance_m * 1000.0,
        phi_deg: plan.phi0_rad * nanobragg_core::units::RTD,
        osc_start_deg: plan.phi0_rad * nanobragg_core::units::RTD,
        osc_range_deg: plan.osc_rad * nanobragg_core::units::RTD,
        twotheta_deg: d.twotheta_rad * nanobragg_core::units::RTD,
    }
}

/// The saturation value of the int32 images: their clip.
pub const SATURATION_I32: i32 = i32::MAX;

/// The spectrum as rendered: (wavelength Å, weight), each source counting
/// its weight where the render weights them, else once.
pub fn plan_spectrum(plan: &Plan) -> Vec<(f64, f64)> {
    let mut spectrum_a: Vec<(f64, f64)> = Vec::new();
    // each wavelength's place in the list, in the order of first appearance
    // (a lookup per source: a spectrum of 10⁶ lines stays linear)
    let mut index: std::collections::HashMap<u64, usize> =
        std::collections::HashMap::with_capacity(plan.sources.list.len());
    for s in &plan.sources.list {
        let lambda_a = s.lambda_m * 1e10;
        // (each source counts once where the render does not weight them)
        let weight = if plan.sources.weighted { s.weight } else { 1.0 };
        // (+0.0 and -0.0 are one wavelength, as == has them)
        let key = (lambda_a + 0.0).to_bits();
        match index.entry(key) {
            std::collections::hash_map::Entry::Occupied(at) => spectrum_a[*at.get()].1 += weight,
            std::collections::hash_map::Entry::Vacant(at) => {
                at.insert(spectrum_a.len());
                spectrum_a.push((lambda_a, weight));
            }
        }
    }
    if spectrum_a.is_empty() {
        spectrum_a.push((plan.lambda0_m * 1e10, 1.0));
    }
    spectrum_a
}

/// Where the direct beam meets a detector's plane, as NXmx and miniCBF
/// define their beam centre and distance.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BeamSpot {
    /// (fast, slow) from the outer corner of the first pixel, in pixels.
    pub centre_px: [f64; 2],
    /// Sample to that point (m).
    pub distance_m: f64,
}

/// The point where the beam from the sample meets `d`'s plane (not C's
/// Fbeam/Sbeam, which after a two-theta swing or a tilt are recomputed
/// from a ratio taken before the rotation). A beam along the plane, which
/// never meets it, gives C's values.
pub fn beam_spot(d: &Detector) -> BeamSpot {
    use nanobragg_core::vec3::{cross, dot, magnitude};
    // (the plane of the pixels: custom axes need not make odet its normal,
    // nor be perpendicular to each other)
    let normal = cross(d.fdet, d.sdet);
    let along = dot(d.beam, normal);
    let t = dot(d.pix0, normal) / along;
    if !(along.abs() > 1e-12 * magnitude(normal) && t.is_finite() && t > 0.0) {
        let centre_px = [d.fbeam_m / d.pixel_size_m, d.sbeam_m / d.pixel_size_m];
        return BeamSpot { centre_px, distance_m: d.distance_m };
    }
    let r: [f64; 3] = std::array::from_fn(|i| d.beam[i] * t - d.pix0[i]);
    // r = u·fdet + v·sdet
    let (ff, fs, ss) = (dot(d.fdet, d.fdet), dot(d.fdet, d.sdet), dot(d.sdet, d.sdet));
    let (rf, rs) = (dot(r, d.fdet), dot(r, d.sdet));
    let det = ff * ss - fs * fs;
    let (u, v) = ((rf * ss - rs * fs) / det, (rs * ff - rf * fs) / det);
    let centre_px = [u / d.pixel_size_m, v / d.pixel_size_m];
    BeamSpot { centre_px, distance_m: t * magnitude(d.beam) }
}

/// The int32 image of this run, each panel with its pixels, with its
/// geometry and values, for the NXmx and CBF writers (the detector-wide
/// values, distance and beam centre, are `plan`'s).
pub fn mx_image<'a>(
    plan: &Plan,
    panels: &[(&Plan, &'a [i32])],
    o: &Outputs,
    one_orientation: bool,
) -> MxImage<'a> {
    use nanobragg_core::units::RTD;
    let d = &plan.detector;
    let spot = beam_spot(d);
    let spectrum_a = plan_spectrum(plan);
    // pixels cannot be negative without a negative offset or read-out noise:
    // then -1 marks an invalid pixel, as on Pilatus detectors; else no value does
    let underload_value =
        if !o.calculate_noise || (o.adc_offset >= 0.0 && o.response.readout_noise <= 0.0) {
            -1
        } else {
            i32::MIN
        };
    let start = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |t| t.as_secs());
    let end = start + plan.exposure_s.max(0.0).round() as u64;
    MxImage {
        panels: panels
            .iter()
            .map(|&(p, pixels)| (&p.detector, pixels))
            .map(|(p, pixels)| Panel {
                origin_m: p.pix0,
                fast: p.fdet,
                slow: p.sdet,
                pixel_size_m: p.pixel_size_m,
                fpixels: p.fpixels,
                spixels: p.spixels,
                pixels,
            })
            .collect(),
        beam: d.beam,
        polar: d.polar,
        spindle: d.spindle,
        wavelength_a: plan.sources.central_lambda_m * 1e10,
        spectrum_a,
        kahn_factor: plan.kahn_factor,
        total_flux: plan.flux,
        distance_m: spot.distance_m,
        beam_centre_px: spot.centre_px,
        exposure_s: plan.exposure_s,
        phi_start_deg: plan.phi0_rad * RTD,
        phi_range_deg: plan.osc_rad * RTD,
        saturation_value: SATURATION_I32,
        underload_value,
        sensor_material: "Si".into(),
        sensor_thickness_m: d.thick_m,
        start_time: utc_iso8601(start),
        end_time: utc_iso8601(end),
        masked: panels.iter().map(|(p, _)| left_out(p)).collect(),
        noise_rng: o.calculate_noise.then(|| o.noise_rng.label()),
        crystal_a: one_orientation.then(|| {
            let c = &plan.cell;
            [c.a_m, c.b_m, c.c_m].map(|v| v.map(|x| x * 1e10))
        }),
    }
}

/// Whether each pixel of the panel of `plan` is left out of its image (its
/// `-mask` 0, outside its `-roi`); empty where none is.
fn left_out(plan: &Plan) -> Vec<bool> {
    let d = &plan.detector;
    let [xmin, xmax, ymin, ymax] = d.roi;
    let all_in =
        xmin <= 0 && ymin <= 0 && xmax >= d.fpixels as i64 - 1 && ymax >= d.spixels as i64 - 1;
    if all_in && plan.mask.as_ref().is_none_or(|m| m.iter().all(|&v| v != 0)) {
        return Vec::new();
    }
    (0..d.spixels as i64)
        .flat_map(|s| (0..d.fpixels as i64).map(move |f| (f, s)))
        .enumerate()
        .map(|(i, (f, s))| {
            let masked = plan.mask.as_ref().is_some_and(|m| m[i] == 0);
            masked || f < xmin || f > xmax || s < ymin || s > ymax
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn detector(args: &str) -> Detector {
        let args: Vec<String> = args.split_whitespace().map(String::from).collect();
        let inv = crate::parse_args(&args).unwrap();
        let seeds = nanobragg_core::setup::SetupSeeds { misset_idum: -1 };
        Plan::new(&inv.config, seeds).unwrap().detector
    }

    #[test]
    fn the_beam_centre_is_where_the_beam_meets_the_swung_detector() {
        // MOSFLM pivots about the beam spot: it stays at Xbeam, Ybeam (plus
        // the half pixel) and 100 mm from the sample whatever the swing
        let base = "-default_F 1 -cell 50 50 50 90 90 90 -mosflm -Xbeam 14 -Ybeam 10 \
                    -distance 100 -pixel 0.1 -detpixels 256";
        for tt in [0.0, 5.0, 10.0, 20.0, 30.0] {
            let d = detector(&format!("{base} -twotheta {tt}"));
            let spot = beam_spot(&d);
            let [f, s] = spot.centre_px;
            assert!((f - 100.5).abs() < 1e-9 && (s - 140.5).abs() < 1e-9, "{tt}: {f} {s}");
            assert!((spot.distance_m - 0.1).abs() < 1e-12, "{tt}: {}", spot.distance_m);
        }
        // about the sample (custom vectors): the spot moves d·tan(2θ) along
        // the plane, and lies on the beam
        let custom = "-default_F 1 -cell 50 50 50 90 90 90 -fdet_vector 0 0 1 \
                      -sdet_vector 0 -1 0 -odet_vector 1 0 0 -pivot sample -Xclose 12.8 \
                      -Yclose 12.8 -distance 100 -pixel 0.1 -detpixels 256";
        for tt in [5.0f64, 20.0] {
            let d = detector(&format!("{custom} -twotheta {tt}"));
            let spot = beam_spot(&d);
            let [f, s] = spot.centre_px.map(|x| x * d.pixel_size_m);
            let p: [f64; 3] = std::array::from_fn(|i| d.pix0[i] + f * d.fdet[i] + s * d.sdet[i]);
            let across = nanobragg_core::vec3::cross(p, d.beam);
            assert!(nanobragg_core::vec3::magnitude(across) < 1e-12, "{tt}: {p:?}");
            let moved = (spot.centre_px[1] - 128.0).hypot(spot.centre_px[0] - 128.0) * 1e-4;
            assert!((moved - 0.1 * tt.to_radians().tan()).abs() < 1e-9, "{tt}: {moved}");
            assert!((spot.distance_m - 0.1 / tt.to_radians().cos()).abs() < 1e-12);
        }
    }
}
