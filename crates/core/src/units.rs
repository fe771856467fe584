//! Unit conversions and physical constants used by nanoBragg.

/// Degrees per radian, as nanoBragg.c computes it (`180*M_1_PI`).
pub const RTD: f64 = 180.0 * std::f64::consts::FRAC_1_PI;
/// Square of the classical electron radius (m²), the Thomson cross section scale.
pub const R_E_SQR: f64 = 7.94079248018965e-30;
/// Avogadro's number as nanoBragg.c defines it.
pub const AVOGADRO: f64 = 6.02214179e23;
/// hc in eV·Å as nanoBragg.c uses it for `-energy`.
pub const HC_EV_A: f64 = 12398.42;
/// Forward-scattering structure factor of water used for `-water`.
pub const WATER_F: f64 = 2.57;
/// Molecular weight of water (g/mol) used for `-water`.
pub const WATER_MW: f64 = 18.0;

/// Millimetres to metres.
#[inline]
pub fn mm_to_m(mm: f64) -> f64 {
    mm / 1000.0
}
/// Degrees to radians, the way nanoBragg.c does it (divide by RTD).
#[inline]
pub fn deg_to_rad(deg: f64) -> f64 {
    deg / RTD
}
/// Ångström to metres (divide by 1e10, as nanoBragg.c does).
#[inline]
pub fn a_to_m(a: f64) -> f64 {
    a / 1.0e10
}
/// Microns to metres.
#[inline]
pub fn um_to_m(um: f64) -> f64 {
    um * 1e-6
}
