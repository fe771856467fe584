//! Atomic models (a unit cell, a space group and atoms) read from PDB and
//! mmCIF files, for computing structure factors from coordinates.
//!
//! Both readers keep what scattering needs and nothing of the chemistry:
//! atoms of every alternative conformation are kept (their occupancies share
//! the site), residues and chains are not recorded, and of a file holding
//! several models (NMR ensembles) only the first is read.

pub mod element;
pub mod mmcif;
pub mod pdb;
pub mod structure_factors;

pub use element::Element;

use crate::error::{Error, Result};
use std::path::Path;

/// A crystal structure as a file gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    /// Unit cell: a, b, c (Å), alpha, beta, gamma (degrees).
    pub cell: [f64; 6],
    /// Hermann–Mauguin symbol of the space group as written in the file, blanks
    /// at its ends removed (`"P 1 21 1"`, `"H 3"`).
    pub space_group: String,
    /// Hall symbol of the space group, when the file gives one (PDB files
    /// never do).
    pub hall: Option<String>,
    /// The atoms of the first model, in file order.
    pub atoms: Vec<Atom>,
}

/// One atom site.
#[derive(Debug, Clone, PartialEq)]
pub struct Atom {
    /// Atom name with blanks at its ends removed (`"CA"`, `"O5'"`).
    pub name: String,
    /// Chemical element.
    pub element: Element,
    /// Formal charge in electrons (`-1` for `1-`); 0 when the file gives none.
    pub charge: i8,
    /// Cartesian coordinates (Å) in the file's frame (the PDB convention: a
    /// along x, b in the x–y plane).
    pub xyz_a: [f64; 3],
    /// Occupancy, in `[0, 1]`; 1 when the file leaves it blank.
    pub occupancy: f64,
    /// Isotropic displacement parameter B (Å², not negative); 0 when the file
    /// leaves it blank.
    pub b_iso_a2: f64,
    /// Anisotropic displacement tensor, Cartesian U11 U22 U33 U12 U13 U23 (Å²),
    /// when the file gives one. Not checked to be positive definite.
    pub u_aniso_a2: Option<[f64; 6]>,
    /// 1-based line of the file the atom's record (or, in mmCIF, the first
    /// value of its row) is on.
    pub line: usize,
}

/// Read a model file, PDB or mmCIF, told apart by content (see
/// [`parse_model`]).
pub fn read_model(path: impl AsRef<Path>) -> Result<Model> {
    let path = path.as_ref();
    let bytes =
        std::fs::read(path).map_err(|source| Error::Io { path: path.to_path_buf(), source })?;
    parse_model(&bytes, path)
}

/// Parse the contents of a model file: mmCIF when its first token (after
/// blanks and `#` comments) starts with `data_`, in any case, else PDB.
/// `path` is only used in error messages.
pub fn parse_model(bytes: &[u8], path: &Path) -> Result<Model> {
    if looks_like_cif(bytes) {
        mmcif::parse_mmcif(bytes, path)
    } else {
        pdb::parse_pdb(bytes, path)
    }
}

/// Whether the first token of `bytes` that is no comment starts with `data_`.
fn looks_like_cif(bytes: &[u8]) -> bool {
    let mut rest = bytes.strip_prefix("\u{feff}".as_bytes()).unwrap_or(bytes);
    loop {
        let start = rest.iter().position(|b| !b.is_ascii_whitespace()).unwrap_or(rest.len());
        rest = &rest[start..];
        if rest.first() == Some(&b'#') {
            let end = rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
            rest = &rest[end..];
            continue;
        }
        return rest.len() >= 5 && rest[..5].eq_ignore_ascii_case(b"data_");
    }
}

/// The error for a file's contents.
fn malformed(path: &Path, msg: String) -> Error {
    Error::Malformed { path: path.to_path_buf(), msg }
}

/// Refuse a cell no crystal can have: lengths must be positive and the angles
/// must close into a parallelepiped of positive volume (which also needs each
/// angle below the sum of the other two). `line` names where the cell was read.
fn check_cell(cell: &[f64; 6], line: usize, path: &Path) -> Result<()> {
    let [a, b, c, alpha, beta, gamma] = *cell;
    if cell.iter().any(|v| !v.is_finite()) {
        return Err(malformed(path, format!("line {line}: cell parameter is not a finite number")));
    }
    if a <= 0.0 || b <= 0.0 || c <= 0.0 {
        return Err(malformed(path, format!("line {line}: cell lengths {a} {b} {c} must be > 0")));
    }
    let (ca, cb, cg) =
        (alpha.to_radians().cos(), beta.to_radians().cos(), gamma.to_radians().cos());
    // Volume over abc, squared: zero or below when the three angles cannot
    // meet at one corner.
    let v2 = 1.0 - ca * ca - cb * cb - cg * cg + 2.0 * ca * cb * cg;
    let in_range = |x: f64| x > 0.0 && x < 180.0;
    if !(in_range(alpha) && in_range(beta) && in_range(gamma)) || v2 <= 1e-12 {
        return Err(malformed(
            path,
            format!("line {line}: cell angles {alpha} {beta} {gamma} make no cell"),
        ));
    }
    Ok(())
}

/// Refuse values no atom can have, naming the atom's line.
fn check_atom(atom: &Atom, path: &Path) -> Result<()> {
    let line = atom.line;
    if atom.xyz_a.iter().any(|v| !v.is_finite()) {
        return Err(malformed(path, format!("line {line}: coordinate is not a finite number")));
    }
    if !atom.occupancy.is_finite() {
        return Err(malformed(path, format!("line {line}: occupancy is not a finite number")));
    }
    if !(0.0..=1.0).contains(&atom.occupancy) {
        return Err(malformed(
            path,
            format!("line {line}: occupancy {} outside [0, 1]", atom.occupancy),
        ));
    }
    if !atom.b_iso_a2.is_finite() {
        return Err(malformed(path, format!("line {line}: B factor is not a finite number")));
    }
    if atom.b_iso_a2 < 0.0 {
        return Err(malformed(
            path,
            format!("line {line}: B factor {} is negative", atom.b_iso_a2),
        ));
    }
    if atom.u_aniso_a2.is_some_and(|u| u.iter().any(|v| !v.is_finite())) {
        return Err(malformed(path, format!("line {line}: anisotropic U is not a finite number")));
    }
    Ok(())
}

/// Check what both readers found and build the model. `cell_line` is where
/// the cell was read, for its messages.
fn finish(
    cell: [f64; 6],
    cell_line: usize,
    space_group: String,
    hall: Option<String>,
    atoms: Vec<Atom>,
    path: &Path,
) -> Result<Model> {
    check_cell(&cell, cell_line, path)?;
    if atoms.is_empty() {
        return Err(malformed(path, "no atoms".to_string()));
    }
    for atom in &atoms {
        check_atom(atom, path)?;
    }
    Ok(Model { cell, space_group, hall, atoms })
}

/// A number as model files write it: Rust's float syntax after blanks are
/// trimmed, with a standard uncertainty in parentheses after the digits
/// (`1.234(5)`) dropped. Non-finite results are returned as they are, for the
/// checks to name.
fn parse_number(text: &str) -> Option<f64> {
    let t = text.trim();
    let t = match t.strip_suffix(')').and_then(|s| s.rsplit_once('(')) {
        Some((value, su)) if !su.is_empty() && su.bytes().all(|b| b.is_ascii_digit()) => value,
        Some(_) => return None,
        None => t,
    };
    if t.is_empty() {
        return None;
    }
    t.parse::<f64>().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A model with its line numbers cleared, to compare one format's reading
    /// with another's.
    pub(super) fn without_lines(mut m: Model) -> Model {
        for a in &mut m.atoms {
            a.line = 0;
        }
        m
    }

    const PDB: &str = "\
CRYST1   40.000   50.000   60.000  90.00 100.00  90.00 P 1 21 1      2
ATOM      1  N   MET A   1      11.104   6.134  -6.504  1.00 20.00           N
ANISOU    1  N   MET A   1     2406   1892   1614    198    519   -328       N
ATOM      2  CA  MET A   1      11.639   6.071  -5.147  0.50 21.50           C
ATOM      3 FE   HEM A   2       1.000   2.000   3.000  1.00 15.00          FE2+
HETATM    4  O   HOH A   3      -1.500   0.250   9.125  1.00 30.00           O1-
END
";

    const CIF: &str = "\
data_test
#
_cell.length_a 40.000
_cell.length_b 50.000
_cell.length_c 60.000
_cell.angle_alpha 90.00
_cell.angle_beta 100.00
_cell.angle_gamma 90.00
_symmetry.space_group_name_H-M 'P 1 21 1'
#
loop_
_atom_site.group_PDB
_atom_site.id
_atom_site.type_symbol
_atom_site.label_atom_id
_atom_site.label_alt_id
_atom_site.Cartn_x
_atom_site.Cartn_y
_atom_site.Cartn_z
_atom_site.occupancy
_atom_site.B_iso_or_equiv
_atom_site.pdbx_formal_charge
_atom_site.pdbx_PDB_model_num
ATOM   1 N  N  . 11.104 6.134 -6.504 1.00 20.00 ? 1
ATOM   2 C  CA . 11.639 6.071 -5.147 0.50 21.50 ? 1
ATOM   3 Fe FE . 1.000 2.000 3.000 1.00 15.00 2 1
HETATM 4 O  O  . -1.500 0.250 9.125 1.00 30.00 -1 1
#
loop_
_atom_site_anisotrop.id
_atom_site_anisotrop.U[1][1]
_atom_site_anisotrop.U[2][2]
_atom_site_anisotrop.U[3][3]
_atom_site_anisotrop.U[1][2]
_atom_site_anisotrop.U[1][3]
_atom_site_anisotrop.U[2][3]
1 0.2406 0.1892 0.1614 0.0198 0.0519 -0.0328
";

    #[test]
    fn pdb_and_mmcif_give_the_same_model() {
        let p = Path::new("t");
        let from_pdb = parse_model(PDB.as_bytes(), p).unwrap();
        let from_cif = parse_model(CIF.as_bytes(), p).unwrap();
        assert_eq!(from_pdb.atoms.len(), 4);
        assert_eq!(from_pdb.atoms[0].line, 2);
        assert_eq!(from_cif.atoms[0].line, 24);
        assert_eq!(from_pdb.atoms[2].charge, 2);
        assert_eq!(from_pdb.atoms[3].charge, -1);
        assert_eq!(without_lines(from_pdb), without_lines(from_cif));
    }

    #[test]
    fn format_is_chosen_by_content() {
        assert!(looks_like_cif(b"data_x\n"));
        assert!(looks_like_cif(b"\xef\xbb\xbf# comment\n\n  # more\n DATA_1abc\n"));
        assert!(looks_like_cif(b"#\ndata_"));
        assert!(!looks_like_cif(b"HEADER    data_\n"));
        assert!(!looks_like_cif(b"# data_x\n"));
        assert!(!looks_like_cif(b"data"));
        assert!(!looks_like_cif(b""));
        assert!(!looks_like_cif(b"   \n#"));
        // PDB text is read as PDB, and an empty file is a PDB file with no cell.
        let e = parse_model(b"", Path::new("e.pdb")).unwrap_err().to_string();
        assert!(e.contains("no CRYST1 record"), "{e}");
    }

    #[test]
    fn read_model_reports_io_errors_and_reads_files() {
        let dir = std::env::temp_dir().join(format!("nanobragg-model-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = dir.join("missing.pdb");
        assert!(matches!(read_model(&missing), Err(Error::Io { .. })));
        let f = dir.join("m.cif");
        std::fs::write(&f, CIF).unwrap();
        let m = read_model(&f).unwrap();
        assert_eq!(m.space_group, "P 1 21 1");
        assert_eq!(m.cell, [40.0, 50.0, 60.0, 90.0, 100.0, 90.0]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn numbers_with_uncertainties() {
        assert_eq!(parse_number("1.234(5)"), Some(1.234));
        assert_eq!(parse_number(" -12(10) "), Some(-12.0));
        assert_eq!(parse_number("1e2"), Some(100.0));
        assert_eq!(parse_number("1.234()"), None);
        assert_eq!(parse_number("1.234(x)"), None);
        assert_eq!(parse_number("(5)"), None);
        assert_eq!(parse_number(""), None);
        assert_eq!(parse_number("abc"), None);
        assert!(parse_number("nan").unwrap().is_nan());
    }

    #[test]
    fn impossible_cells_are_refused() {
        let p = Path::new("c");
        let ok = [10.0, 10.0, 10.0, 90.0, 90.0, 90.0];
        assert!(check_cell(&ok, 1, p).is_ok());
        assert!(check_cell(&[10.0, 10.0, 10.0, 60.0, 60.0, 60.0], 1, p).is_ok());
        assert!(check_cell(&[10.0, 10.0, 10.0, 120.0, 120.0, 120.0], 1, p).is_err());
        assert!(check_cell(&[10.0, 10.0, 10.0, 90.0, 90.0, 179.0], 1, p).is_ok());
        assert!(check_cell(&[10.0, 10.0, 10.0, 100.0, 100.0, 100.0], 1, p).is_ok());
        assert!(check_cell(&[10.0, 10.0, 10.0, 30.0, 30.0, 90.0], 1, p).is_err());
        assert!(check_cell(&[10.0, 10.0, 10.0, 0.0, 90.0, 90.0], 1, p).is_err());
        assert!(check_cell(&[10.0, 10.0, 10.0, 180.0, 90.0, 90.0], 1, p).is_err());
        let e = check_cell(&[10.0, 0.0, 10.0, 90.0, 90.0, 90.0], 7, p).unwrap_err().to_string();
        assert!(e.contains("line 7: cell lengths 10 0 10 must be > 0"), "{e}");
        let e = check_cell(&[10.0, 10.0, 10.0, 90.0, 90.0, 200.0], 3, p).unwrap_err().to_string();
        assert!(e.contains("line 3: cell angles 90 90 200 make no cell"), "{e}");
        let e = check_cell(&[f64::NAN, 1.0, 1.0, 90.0, 90.0, 90.0], 2, p).unwrap_err().to_string();
        assert!(e.contains("line 2: cell parameter is not a finite number"), "{e}");
    }
}
