//! Crystallographic space groups: symmetry operators from Hall symbols, the
//! settings of International Tables Vol. B (Table A1.4.2.7) looked up by
//! Hermann-Mauguin symbol or number, systematic absences and the Miller
//! indices related by symmetry.
//!
//! Hall symbols (S. R. Hall, Acta Cryst. A37 (1981) 517; ITB section A1.4.2)
//! describe a group by its lattice and a few generators, so one parser plus a
//! table of symbols covers every setting; the operators come from closing the
//! generators under multiplication. Operators act on fractional coordinates
//! and keep translations as integers over [`T_DEN`], so that comparing and
//! closing groups is exact.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::OnceLock;

use super::space_group_table::SETTINGS;

/// Denominator of translations: 24 holds 1/2, 1/3, 1/4, 1/6, 1/8, 1/12.
pub const T_DEN: i32 = 24;

/// No space group has more operators than this (F m -3 m: 48 rotations times
/// four centring translations); more means the generators are not a space group.
const MAX_OPERATORS: usize = 192;

/// The most rotations of a crystallographic point group (m -3 m).
const MAX_ROTATIONS: usize = 48;

/// In the bases Hall symbols use, every rotation of a crystallographic group
/// has entries -1, 0 or 1; an entry beyond this bound shows generators of an
/// infinite group (and stops the products from growing until they overflow).
const MAX_ROTATION_ENTRY: i32 = 2;

const IDENTITY_ROTATION: [[i32; 3]; 3] = [[1, 0, 0], [0, 1, 0], [0, 0, 1]];
const INVERSION_ROTATION: [[i32; 3]; 3] = [[-1, 0, 0], [0, -1, 0], [0, 0, -1]];

/// A symmetry operator on fractional coordinates: x' = rot·x + tran/[`T_DEN`].
///
/// Translations are kept reduced into [0, [`T_DEN`]): an operator and the same
/// operator followed by a lattice translation are one operator of the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SymOp {
    /// The rotation part, row by row (x'_i = Σ_j rot\[i\]\[j\]·x_j + …).
    pub rot: [[i32; 3]; 3],
    /// The translation part in units of 1/[`T_DEN`], each in [0, [`T_DEN`]).
    pub tran: [i32; 3],
}

impl SymOp {
    /// The identity operator x, y, z.
    pub const IDENTITY: SymOp = SymOp { rot: IDENTITY_ROTATION, tran: [0; 3] };

    /// The operator with this rotation and translation (in 1/[`T_DEN`]),
    /// the translation reduced into [0, [`T_DEN`]).
    pub fn new(rot: [[i32; 3]; 3], tran: [i32; 3]) -> SymOp {
        SymOp { rot, tran: tran.map(|t| t.rem_euclid(T_DEN)) }
    }

    /// Parses an operator written as a coordinate triplet such as
    /// "-y+1/2,x-y,z+1/3" (terms in any order, integer coefficients, constant
    /// fractions whose denominators divide [`T_DEN`]).
    pub fn from_triplet(triplet: &str) -> Result<SymOp, SpaceGroupError> {
        let fail = |problem: String| SpaceGroupError::new(triplet, problem);
        let rows: Vec<&str> = triplet.split(',').collect();
        if rows.len() != 3 {
            return Err(fail(format!(
                "an operator has three comma-separated components, not {}",
                rows.len()
            )));
        }
        let mut rot = [[0; 3]; 3];
        let mut tran = [0; 3];
        for (i, row) in rows.iter().enumerate() {
            let (coefficients, constant) = parse_triplet_component(row).map_err(&fail)?;
            rot[i] = coefficients;
            tran[i] = constant;
        }
        Ok(SymOp::new(rot, tran))
    }

    /// The image of the fractional position `frac` (not wrapped into the cell).
    pub fn apply(&self, frac: [f64; 3]) -> [f64; 3] {
        let t = self.translation();
        std::array::from_fn(|i| {
            (0..3).map(|j| f64::from(self.rot[i][j]) * frac[j]).sum::<f64>() + t[i]
        })
    }

    /// The translation part as fractions of the cell edges, each in [0, 1).
    pub fn translation(&self) -> [f64; 3] {
        self.tran.map(|t| f64::from(t) / f64::from(T_DEN))
    }

    /// The operator as a coordinate triplet, "x,y+1/2,-z" style: per row the
    /// x, y, z terms in that order, then the translation as a reduced fraction.
    pub fn triplet(&self) -> String {
        let rows: Vec<String> =
            (0..3).map(|i| triplet_component(self.rot[i], self.tran[i])).collect();
        rows.join(",")
    }

    /// The Miller index this operator maps `h` to: the row vector h times the
    /// rotation, h'_j = Σ_i h_i·rot\[i\]\[j\]. Arithmetic wraps for indices near
    /// the i32 limits instead of panicking.
    pub fn hkl(&self, h: [i32; 3]) -> [i32; 3] {
        std::array::from_fn(|j| {
            (0..3).fold(0i32, |sum, i| sum.wrapping_add(h[i].wrapping_mul(self.rot[i][j])))
        })
    }

    /// The phase shift h·t in cycles, reduced into [0, 1), t being this
    /// operator's translation.
    ///
    /// Sign convention: with F(h) = Σ f_j exp(+2πi h·x_j) over the atoms,
    /// F(h·R) = F(h)·exp(−2πi·`phase_shift(h)`), R being this operator's
    /// rotation (so |F| is equal at symmetry-equivalent indices).
    pub fn phase_shift(&self, h: [i32; 3]) -> f64 {
        f64::from(self.phase_units(h)) / f64::from(T_DEN)
    }

    /// h·t in units of 1/[`T_DEN`] cycles, in [0, [`T_DEN`]); exact, for tests
    /// of whether a phase vanishes.
    fn phase_units(&self, h: [i32; 3]) -> i32 {
        let units: i64 = (0..3).map(|i| i64::from(h[i]) * i64::from(self.tran[i])).sum();
        // the remainder lies in [0, T_DEN), so the conversion cannot fail
        i32::try_from(units.rem_euclid(i64::from(T_DEN))).unwrap_or(0)
    }

    /// `self` after `first`: x ↦ self(first(x)).
    fn after(&self, first: &SymOp) -> SymOp {
        let rot = mat_mul(&self.rot, &first.rot);
        let moved = mat_vec(&self.rot, first.tran);
        SymOp::new(rot, std::array::from_fn(|i| moved[i] + self.tran[i]))
    }

    fn is_pure_translation(&self) -> bool {
        self.rot == IDENTITY_ROTATION
    }
}

impl fmt::Display for SymOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.triplet())
    }
}

/// What went wrong with a space-group symbol (or an operator triplet): the
/// text as given and the problem with it.
#[derive(Debug, Clone, PartialEq)]
pub struct SpaceGroupError {
    symbol: String,
    problem: String,
}

impl SpaceGroupError {
    fn new(symbol: &str, problem: impl Into<String>) -> SpaceGroupError {
        SpaceGroupError { symbol: symbol.to_string(), problem: problem.into() }
    }

    /// The symbol (or triplet) that was rejected, as given.
    pub fn symbol(&self) -> &str {
        &self.symbol
    }

    /// What is wrong with it.
    pub fn problem(&self) -> &str {
        &self.problem
    }
}

// Written out rather than derived, like crate::error's (no derive macros in core).
impl fmt::Display for SpaceGroupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "space group '{}': {}", self.symbol, self.problem)
    }
}

impl std::error::Error for SpaceGroupError {}

/// A space group in one setting: its number, symbols and every operator.
#[derive(Debug, Clone, PartialEq)]
pub struct SpaceGroup {
    number: u16,
    hm: String,
    hall: String,
    /// The point operators (one per rotation, identity first) followed by
    /// their copies under each further centring translation.
    ops: Vec<SymOp>,
    /// How many leading entries of `ops` are the point operators.
    rotations: usize,
}

impl SpaceGroup {
    /// The group a Hall symbol describes, e.g. "-P 2ac 2n" or "P 61 2 (0 0 -1)".
    ///
    /// The number and H-M symbol are those of the setting in ITB Table
    /// A1.4.2.7 with exactly these operators. Failing that, a setting that
    /// differs by an origin shift s (in multiples of 1/[`T_DEN`]) is named,
    /// and the H-M symbol then carries the shift as a change of basis, e.g.
    /// "P 21 21 21 (x+1/12,y,z)". Operators matching no setting even so are an
    /// error, as are malformed symbols and generators that are no space group.
    pub fn from_hall(hall: &str) -> Result<SpaceGroup, SpaceGroupError> {
        let normalised = hall.split_whitespace().collect::<Vec<_>>().join(" ");
        let ops = operators_of_hall(hall)?;
        if let Some(setting) = SETTINGS.iter().find(|s| s.hall == normalised) {
            return Ok(SpaceGroup::assemble(
                setting.number,
                setting.hm.to_string(),
                normalised,
                ops,
            ));
        }
        let (number, hm) = identify(&ops).ok_or_else(|| {
            SpaceGroupError::new(
                hall,
                "its operators match no setting of International Tables Vol. B \
                 Table A1.4.2.7, not even after an origin shift",
            )
        })?;
        Ok(SpaceGroup::assemble(number, hm, normalised, ops))
    }

    /// The group a symbol names. Accepted:
    /// - an H-M symbol, full or short, in any case and spacing: "P 1 21 1",
    ///   "P21", "p212121", "C 2", "P 21/c", "P 2/m 2/m 2/m", "P 61 2 2";
    ///   short monoclinic symbols mean the unique axis b setting, and
    ///   the ITA 2002 e-glide symbols (A e m 2, A e a 2, C m c e, C m m e,
    ///   C c c e) the standard setting of their group;
    /// - a setting suffix where ITB has several settings: ":1"/":2" (origin
    ///   choice), ":H"/":R" (hexagonal or rhombohedral axes), or the table's
    ///   qualifier (":b1", ":-c2", ":cab", ":ba-c", …); without one the first
    ///   setting ITB lists (origin choice 1, hexagonal axes);
    /// - the PDB's "H 3", "H -3", "H 3 2", "H 3 m", … for a rhombohedral group
    ///   on hexagonal axes (R 3:H, …);
    /// - a number, "19", with an optional suffix as above ("48:2");
    /// - "Hall:" and a Hall symbol, "Hall: -P 2ac 2n" (see [`SpaceGroup::from_hall`]).
    pub fn from_symbol(symbol: &str) -> Result<SpaceGroup, SpaceGroupError> {
        let trimmed = symbol.trim();
        if trimmed.is_empty() {
            return Err(SpaceGroupError::new(symbol, "the symbol is empty"));
        }
        if let Some(hall) = strip_prefix_ignoring_case(trimmed, "hall:") {
            return SpaceGroup::from_hall(hall);
        }
        let mut parts = trimmed.split(':');
        let main = parts.next().unwrap_or("").trim();
        let mut suffixes: Vec<String> = parts.map(|p| p.trim().to_ascii_lowercase()).collect();
        if suffixes.iter().any(String::is_empty) {
            return Err(SpaceGroupError::new(symbol, "nothing follows a ':'"));
        }
        if main.is_empty() {
            return Err(SpaceGroupError::new(symbol, "no symbol before the ':'"));
        }
        let candidates: Vec<usize> = if main.bytes().all(|b| b.is_ascii_digit()) {
            rows_of_number(main).map_err(|problem| SpaceGroupError::new(symbol, problem))?
        } else {
            let (key, implied_suffix) = hm_lookup_key(main);
            if let Some(implied) = implied_suffix {
                if suffixes.iter().any(|s| s == "r") {
                    return Err(SpaceGroupError::new(
                        symbol,
                        "an H lattice means hexagonal axes, which contradicts ':R'",
                    ));
                }
                suffixes.push(implied.to_string());
            }
            hm_index().get(&key).cloned().ok_or_else(|| {
                SpaceGroupError::new(symbol, "no space group has this Hermann-Mauguin symbol")
            })?
        };
        let index = select_setting(&candidates, &suffixes)
            .map_err(|problem| SpaceGroupError::new(symbol, problem))?;
        let setting = &SETTINGS[index];
        let ops = operators_of_hall(setting.hall)?;
        Ok(SpaceGroup::assemble(
            setting.number,
            setting.hm.to_string(),
            setting.hall.to_string(),
            ops,
        ))
    }

    /// Orders the operators (point operators first, identity leading, then
    /// each further centring translation's copies) and counts the rotations.
    fn assemble(number: u16, hm: String, hall: String, ops: Vec<SymOp>) -> SpaceGroup {
        let mut centrings: Vec<[i32; 3]> =
            ops.iter().filter(|op| op.is_pure_translation()).map(|op| op.tran).collect();
        centrings.sort_unstable();
        let mut point_ops: Vec<SymOp> = Vec::new();
        for op in &ops {
            match point_ops.iter_mut().find(|p| p.rot == op.rot) {
                // the smallest translation per rotation, so that the choice does
                // not depend on the order the closure found the operators in
                Some(p) if op.tran < p.tran => *p = *op,
                Some(_) => {}
                None => point_ops.push(*op),
            }
        }
        let rotations = point_ops.len();
        let mut ordered = Vec::with_capacity(ops.len());
        for c in &centrings {
            for p in &point_ops {
                ordered.push(SymOp::new(p.rot, std::array::from_fn(|i| p.tran[i] + c[i])));
            }
        }
        SpaceGroup { number, hm, hall, ops: ordered, rotations }
    }

    /// The space-group number, 1 to 230.
    pub fn number(&self) -> u16 {
        self.number
    }

    /// The extended Hermann-Mauguin symbol of the setting, e.g. "P 1 21 1",
    /// "R 3:H", "P n n n:2".
    pub fn hm(&self) -> &str {
        &self.hm
    }

    /// The Hall symbol the operators were built from (spacing normalised).
    pub fn hall(&self) -> &str {
        &self.hall
    }

    /// Every operator, centring translations included, identity first: the
    /// point operators (one per rotation), then their copies shifted by each
    /// further centring translation.
    pub fn ops(&self) -> &[SymOp] {
        &self.ops
    }

    /// Whether the group holds the inversion (at any point), i.e. F(−h) is
    /// tied to F(h) by symmetry and not only by Friedel's law.
    pub fn is_centrosymmetric(&self) -> bool {
        self.ops.iter().any(|op| op.rot == INVERSION_ROTATION)
    }

    /// Whether symmetry forces F(h) = 0: some operator maps h onto itself
    /// with a phase shift that is not a whole number of cycles (centring
    /// translations, screw axes, glide planes). F(0,0,0) is never absent.
    pub fn is_systematically_absent(&self, h: [i32; 3]) -> bool {
        self.ops.iter().any(|op| op.hkl(h) == h && op.phase_units(h) != 0)
    }

    /// The distinct Miller indices equivalent to h under the point group, h
    /// itself first, each with the phase shift φ (cycles, in [0, 1)) relating
    /// F there to F(h): F(h') = F(h)·exp(−2πi φ) (see [`SymOp::phase_shift`]).
    ///
    /// Friedel mates are not added: with anomalous scattering F(−h) differs
    /// from F(h)*. In a centrosymmetric group −h is among the results anyway,
    /// the inversion being one of the group's operators. For a general h
    /// there are as many indices as the point group has operators. For an
    /// absent h the phases of operators fixing h disagree; the first one's is
    /// given.
    pub fn equivalents(&self, h: [i32; 3]) -> Vec<([i32; 3], f64)> {
        let mut found: Vec<([i32; 3], f64)> = Vec::with_capacity(self.rotations);
        for op in &self.ops[..self.rotations] {
            let image = op.hkl(h);
            if !found.iter().any(|(seen, _)| *seen == image) {
                found.push((image, op.phase_shift(h)));
            }
        }
        found
    }
}

/// Every setting of ITB Table A1.4.2.7 in the table's order: number, extended
/// H-M symbol (with its ":1"/":2"/":H"/":R" suffix where it has one) and Hall
/// symbol. Each H-M symbol is accepted by [`SpaceGroup::from_symbol`] and each
/// Hall symbol by [`SpaceGroup::from_hall`].
pub fn settings() -> impl Iterator<Item = (u16, &'static str, &'static str)> {
    SETTINGS.iter().map(|s| (s.number, s.hm, s.hall))
}

// ---------------------------------------------------------------------------
// Hall symbols

/// A rotation axis of a Hall matrix symbol.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Axis {
    /// Along a (0), b (1) or c (2).
    Principal(usize),
    /// A face diagonal perpendicular to a principal axis: ' (first: along
    /// b−c, c−a or a−b) or " (second: b+c, c+a or a+b).
    FaceDiagonal { normal_to: usize, second: bool },
    /// The body diagonal a+b+c (symbol *).
    BodyDiagonal,
}

impl Axis {
    /// The principal axis this one is given relative to, for a following ' or ".
    fn principal(self) -> Option<usize> {
        match self {
            Axis::Principal(p) | Axis::FaceDiagonal { normal_to: p, .. } => Some(p),
            Axis::BodyDiagonal => None,
        }
    }

    /// The direction along the axis, for screw translations.
    fn direction(self) -> [i32; 3] {
        match self {
            Axis::Principal(p) => permute_vector([0, 0, 1], p),
            Axis::FaceDiagonal { normal_to, second } => {
                permute_vector([1, if second { 1 } else { -1 }, 0], normal_to)
            }
            Axis::BodyDiagonal => [1, 1, 1],
        }
    }
}

/// One matrix symbol of a Hall symbol, parsed but with its axis not yet
/// defaulted (that depends on its neighbours).
struct MatrixSymbol {
    improper: bool,
    order: u8,
    screw: u8,
    principal: Option<usize>,
    /// ' (false) or " (true).
    diagonal: Option<bool>,
    body_diagonal: bool,
    translation: [i32; 3],
}

/// The operators (centring included, unordered) of a Hall symbol.
fn operators_of_hall(hall: &str) -> Result<Vec<SymOp>, SpaceGroupError> {
    let fail = |problem: String| SpaceGroupError::new(hall, problem);
    let (body, change_of_basis) = match hall.find('(') {
        Some(open) => {
            let rest = &hall[open + 1..];
            let close = rest.find(')').ok_or_else(|| fail("a '(' is never closed".into()))?;
            if !rest[close + 1..].trim().is_empty() {
                return Err(fail("text follows the change of basis '(...)'".into()));
            }
            (&hall[..open], Some(parse_change_of_basis(&rest[..close]).map_err(fail)?))
        }
        None => (hall, None),
    };
    let mut tokens = body.split_whitespace();
    let lattice = tokens.next().ok_or_else(|| fail("the Hall symbol is empty".into()))?;
    let (centrosymmetric, lattice_letter) = match lattice.strip_prefix('-') {
        Some(letter) => (true, letter),
        None => (false, lattice),
    };
    let centring = centring_vectors(lattice_letter).ok_or_else(|| {
        fail(format!(
            "'{lattice}' is not a lattice symbol (P, A, B, C, I, R, F or H, optionally after '-')"
        ))
    })?;
    let symbols: Vec<MatrixSymbol> =
        tokens.map(|t| parse_matrix_symbol(t).map_err(&fail)).collect::<Result<_, _>>()?;
    if symbols.len() > 4 {
        return Err(fail(format!("{} matrix symbols, at most 4 are allowed", symbols.len())));
    }
    let mut generators: Vec<SymOp> =
        centring.iter().skip(1).map(|&t| SymOp::new(IDENTITY_ROTATION, t)).collect();
    if centrosymmetric {
        generators.push(SymOp::new(INVERSION_ROTATION, [0; 3]));
    }
    let mut previous: Option<(u8, Axis)> = None;
    for (position, symbol) in symbols.iter().enumerate() {
        let axis = resolve_axis(symbol, position, previous).map_err(&fail)?;
        generators.push(matrix_operator(symbol, axis));
        previous = Some((symbol.order, axis));
    }
    let mut ops = close_group(&generators).map_err(fail)?;
    if let Some(basis) = change_of_basis {
        let inverse = inverse_unimodular(&basis);
        ops = ops.iter().map(|op| basis.after(op).after(&inverse)).collect();
    }
    Ok(ops)
}

/// Centring translations (1/[`T_DEN`]) of a lattice symbol, zero first.
fn centring_vectors(letter: &str) -> Option<Vec<[i32; 3]>> {
    const H: i32 = T_DEN / 2;
    const THIRD: i32 = T_DEN / 3;
    let vectors: Vec<[i32; 3]> = match letter.to_ascii_uppercase().as_str() {
        "P" => vec![],
        "A" => vec![[0, H, H]],
        "B" => vec![[H, 0, H]],
        "C" => vec![[H, H, 0]],
        "I" => vec![[H, H, H]],
        // obverse rhombohedral centring of hexagonal axes
        "R" => vec![[2 * THIRD, THIRD, THIRD], [THIRD, 2 * THIRD, 2 * THIRD]],
        "F" => vec![[0, H, H], [H, 0, H], [H, H, 0]],
        // the triple hexagonal cell (not the PDB's H, see from_symbol)
        "H" => vec![[2 * THIRD, THIRD, 0], [THIRD, 2 * THIRD, 0]],
        _ => return None,
    };
    Some(std::iter::once([0; 3]).chain(vectors).collect())
}

fn parse_matrix_symbol(token: &str) -> Result<MatrixSymbol, String> {
    let bad = |why: &str| format!("matrix symbol '{token}': {why}");
    let (improper, rest) = match token.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, token),
    };
    let mut chars = rest.chars().peekable();
    let order = match chars.next() {
        Some(c @ ('1' | '2' | '3' | '4' | '6')) => c as u8 - b'0',
        _ => return Err(bad("must start with a rotation order 1, 2, 3, 4 or 6")),
    };
    let mut symbol = MatrixSymbol {
        improper,
        order,
        screw: 0,
        principal: None,
        diagonal: None,
        body_diagonal: false,
        translation: [0; 3],
    };
    // a screw digit is the subscript of the order, so it can only come next
    if let Some(&c) = chars.peek() {
        if let Some(digit) = c.to_digit(10) {
            if digit == 0 || digit >= u32::from(order) {
                return Err(bad("a screw component must lie between 1 and the order minus 1"));
            }
            symbol.screw = digit as u8;
            chars.next();
        }
    }
    let mut translations_seen = String::new();
    let quarter = T_DEN / 4;
    let half = T_DEN / 2;
    for c in chars {
        let c = c.to_ascii_lowercase();
        let shift: Option<[i32; 3]> = match c {
            'a' => Some([half, 0, 0]),
            'b' => Some([0, half, 0]),
            'c' => Some([0, 0, half]),
            'n' => Some([half, half, half]),
            'u' => Some([quarter, 0, 0]),
            'v' => Some([0, quarter, 0]),
            'w' => Some([0, 0, quarter]),
            'd' => Some([quarter, quarter, quarter]),
            _ => None,
        };
        if let Some(shift) = shift {
            if translations_seen.contains(c) {
                return Err(bad(&format!("translation '{c}' is given twice")));
            }
            translations_seen.push(c);
            for (t, s) in symbol.translation.iter_mut().zip(shift) {
                *t += s;
            }
            continue;
        }
        match c {
            'x' | 'y' | 'z' => {
                if symbol.principal.is_some() || symbol.body_diagonal {
                    return Err(bad("more than one axis"));
                }
                symbol.principal = Some(match c {
                    'x' => 0,
                    'y' => 1,
                    _ => 2,
                });
            }
            '\'' | '"' => {
                if symbol.diagonal.is_some() || symbol.body_diagonal {
                    return Err(bad("more than one axis"));
                }
                symbol.diagonal = Some(c == '"');
            }
            '*' => {
                if symbol.principal.is_some() || symbol.diagonal.is_some() || symbol.body_diagonal {
                    return Err(bad("more than one axis"));
                }
                symbol.body_diagonal = true;
            }
            '0'..='9' => return Err(bad("a screw digit must follow the rotation order directly")),
            _ => return Err(bad(&format!("'{c}' is neither an axis nor a translation symbol"))),
        }
    }
    Ok(symbol)
}

/// The axis of a matrix symbol, applying Hall's defaults: the first rotation
/// is about c; a 2-fold in second place is about a after a 2- or 4-fold and
/// along a−b after a 3- or 6-fold; a 3-fold after the first place is along
/// a+b+c; ' and " are relative to the preceding rotation's axis (c if none).
fn resolve_axis(
    symbol: &MatrixSymbol,
    position: usize,
    previous: Option<(u8, Axis)>,
) -> Result<Axis, String> {
    let order = symbol.order;
    if symbol.body_diagonal {
        return if order == 3 {
            Ok(Axis::BodyDiagonal)
        } else {
            Err(format!("a {order}-fold rotation cannot lie along the body diagonal '*'"))
        };
    }
    if let Some(second) = symbol.diagonal {
        if order != 2 {
            return Err(format!("a {order}-fold rotation cannot lie along a face diagonal"));
        }
        let normal_to = symbol
            .principal
            .or_else(|| previous.and_then(|(_, axis)| axis.principal()))
            .unwrap_or(2);
        return Ok(Axis::FaceDiagonal { normal_to, second });
    }
    if let Some(p) = symbol.principal {
        return Ok(Axis::Principal(p));
    }
    match (position, order, previous) {
        // the axis of a 1-fold is immaterial
        (_, 1, _) => Ok(Axis::Principal(2)),
        (0, _, _) => Ok(Axis::Principal(2)),
        (1, 2, Some((2 | 4, _))) => Ok(Axis::Principal(0)),
        (1, 2, Some((3 | 6, previous_axis))) => Ok(Axis::FaceDiagonal {
            normal_to: previous_axis.principal().unwrap_or(2),
            second: false,
        }),
        (_, 3, _) => Ok(Axis::BodyDiagonal),
        _ => Err(format!(
            "the {order}-fold rotation in place {} needs an explicit axis",
            position + 1
        )),
    }
}

/// The operator of a matrix symbol about a resolved axis.
fn matrix_operator(symbol: &MatrixSymbol, axis: Axis) -> SymOp {
    let proper = match axis {
        Axis::Principal(p) => permute_matrix(&rotation_about_c(symbol.order), p),
        Axis::FaceDiagonal { normal_to, second } => {
            // only 2-folds get here (resolve_axis)
            let about_c = if second {
                [[0, 1, 0], [1, 0, 0], [0, 0, -1]]
            } else {
                [[0, -1, 0], [-1, 0, 0], [0, 0, -1]]
            };
            permute_matrix(&about_c, normal_to)
        }
        Axis::BodyDiagonal => [[0, 0, 1], [1, 0, 0], [0, 1, 0]],
    };
    let rot = if symbol.improper { proper.map(|row| row.map(|e| -e)) } else { proper };
    let mut tran = symbol.translation;
    if symbol.screw > 0 {
        // screw m of an n-fold: m/n of a turn along the axis (n divides T_DEN)
        let shift = T_DEN * i32::from(symbol.screw) / i32::from(symbol.order);
        for (t, d) in tran.iter_mut().zip(axis.direction()) {
            *t += d * shift;
        }
    }
    SymOp::new(rot, tran)
}

/// The proper n-fold rotation about c (anticlockwise seen from +c).
fn rotation_about_c(order: u8) -> [[i32; 3]; 3] {
    match order {
        2 => [[-1, 0, 0], [0, -1, 0], [0, 0, 1]],
        3 => [[0, -1, 0], [1, -1, 0], [0, 0, 1]],
        4 => [[0, -1, 0], [1, 0, 0], [0, 0, 1]],
        6 => [[1, -1, 0], [1, 0, 0], [0, 0, 1]],
        _ => IDENTITY_ROTATION,
    }
}

/// Where index i (0 = a, 1 = b, 2 = c) of an operator about c goes for an
/// operator about `axis`: the cyclic relabelling that takes c to that axis.
fn relabel(i: usize, axis: usize) -> usize {
    (i + axis + 1) % 3
}

fn permute_matrix(about_c: &[[i32; 3]; 3], axis: usize) -> [[i32; 3]; 3] {
    let mut out = [[0; 3]; 3];
    for (i, row) in about_c.iter().enumerate() {
        for (j, &e) in row.iter().enumerate() {
            out[relabel(i, axis)][relabel(j, axis)] = e;
        }
    }
    out
}

fn permute_vector(along_c: [i32; 3], axis: usize) -> [i32; 3] {
    let mut out = [0; 3];
    for (i, &e) in along_c.iter().enumerate() {
        out[relabel(i, axis)] = e;
    }
    out
}

/// All products of the generators (with the identity), or why they are no
/// space group.
fn close_group(generators: &[SymOp]) -> Result<Vec<SymOp>, String> {
    let mut ops = vec![SymOp::IDENTITY];
    let mut seen: HashSet<SymOp> = ops.iter().copied().collect();
    let mut rotations: HashSet<[[i32; 3]; 3]> = HashSet::from([IDENTITY_ROTATION]);
    let mut next = 0;
    // every element is a word in the generators, so multiplying each element
    // found by each generator until nothing new appears reaches the whole group
    while next < ops.len() {
        let current = ops[next];
        next += 1;
        for generator in generators {
            let product = generator.after(&current);
            if seen.contains(&product) {
                continue;
            }
            if product.rot.iter().flatten().any(|e| e.abs() > MAX_ROTATION_ENTRY) {
                return Err("the generators form no crystallographic group".into());
            }
            rotations.insert(product.rot);
            if rotations.len() > MAX_ROTATIONS || ops.len() >= MAX_OPERATORS {
                return Err(format!(
                    "the generators give more than {MAX_ROTATIONS} rotations or \
                     {MAX_OPERATORS} operators, so they form no space group"
                ));
            }
            seen.insert(product);
            ops.push(product);
        }
    }
    Ok(ops)
}

/// The change of basis of a Hall symbol, the text between the parentheses:
/// either an origin shift "0 0 -1" in twelfths or an operator "x,y,z+1/12".
/// Its rotation must be integral and unimodular (the cell volume unchanged).
fn parse_change_of_basis(text: &str) -> Result<SymOp, String> {
    let basis = if text.contains(',') {
        SymOp::from_triplet(text).map_err(|e| format!("change of basis: {}", e.problem()))?
    } else {
        let twelfths: Vec<i32> = text
            .split_whitespace()
            .map(|n| n.parse::<i32>().map_err(|_| format!("shift '{n}' is not an integer")))
            .collect::<Result<_, _>>()?;
        let [a, b, c] = twelfths[..] else {
            return Err(format!(
                "an origin shift has three components (in twelfths), not {}",
                twelfths.len()
            ));
        };
        let scale = T_DEN / 12;
        let shift = [a, b, c].map(|t| (t % 12) * scale);
        SymOp::new(IDENTITY_ROTATION, shift)
    };
    if basis.rot.iter().flatten().any(|e| e.abs() > 12) || determinant(&basis.rot).abs() != 1 {
        return Err("the change of basis must keep the cell volume (determinant ±1)".into());
    }
    Ok(basis)
}

/// The inverse of an operator whose rotation has determinant ±1.
fn inverse_unimodular(op: &SymOp) -> SymOp {
    let m = &op.rot;
    let det = determinant(m);
    let cofactor = |r: usize, c: usize| {
        let (r1, r2) = ((r + 1) % 3, (r + 2) % 3);
        let (c1, c2) = ((c + 1) % 3, (c + 2) % 3);
        m[r1][c1] * m[r2][c2] - m[r1][c2] * m[r2][c1]
    };
    // adjugate (transposed cofactors) over a determinant of ±1
    let rot: [[i32; 3]; 3] = std::array::from_fn(|i| std::array::from_fn(|j| cofactor(j, i) * det));
    let moved = mat_vec(&rot, op.tran);
    SymOp::new(rot, moved.map(|t| -t))
}

fn determinant(m: &[[i32; 3]; 3]) -> i32 {
    m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1])
        - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
        + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0])
}

fn mat_mul(a: &[[i32; 3]; 3], b: &[[i32; 3]; 3]) -> [[i32; 3]; 3] {
    std::array::from_fn(|i| std::array::from_fn(|j| (0..3).map(|k| a[i][k] * b[k][j]).sum()))
}

fn mat_vec(a: &[[i32; 3]; 3], v: [i32; 3]) -> [i32; 3] {
    std::array::from_fn(|i| (0..3).map(|k| a[i][k] * v[k]).sum())
}

// ---------------------------------------------------------------------------
// Coordinate triplets

/// One component of a triplet, "-x+y+1/3": the x, y, z coefficients and the
/// constant in 1/[`T_DEN`].
fn parse_triplet_component(text: &str) -> Result<([i32; 3], i32), String> {
    let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    if compact.is_empty() {
        return Err("a component is empty".into());
    }
    let mut coefficients = [0; 3];
    let mut constant = 0i32;
    let mut rest = compact.as_str();
    while !rest.is_empty() {
        let (negative, after_sign) = match rest.as_bytes()[0] {
            b'-' => (true, &rest[1..]),
            b'+' => (false, &rest[1..]),
            _ => (false, rest),
        };
        let end = after_sign.find(['+', '-']).unwrap_or(after_sign.len());
        let term = &after_sign[..end];
        rest = &after_sign[end..];
        let sign = if negative { -1 } else { 1 };
        let bad = || format!("'{term}' in '{text}' is not a term like x, -2y or 1/4");
        if term.is_empty() {
            return Err(bad());
        }
        let variable = match term.chars().last().map(|c| c.to_ascii_lowercase()) {
            Some('x') => Some(0),
            Some('y') => Some(1),
            Some('z') => Some(2),
            _ => None,
        };
        match variable {
            Some(index) => {
                let number = term[..term.len() - 1].trim_end_matches('*');
                let coefficient: i32 = if number.is_empty() {
                    1
                } else {
                    number.parse().map_err(|_| {
                        format!("coefficient '{number}' in '{text}' is not a small integer")
                    })?
                };
                if coefficient.abs() > 12 {
                    return Err(format!("coefficient '{number}' in '{text}' is too large"));
                }
                coefficients[index] += sign * coefficient;
            }
            None => {
                let (numerator, denominator) = match term.split_once('/') {
                    Some((n, d)) => (n, d),
                    None => (term, "1"),
                };
                let numerator: i64 = numerator.parse().map_err(|_| bad())?;
                let denominator: i64 = denominator.parse().map_err(|_| bad())?;
                let units = numerator.checked_mul(i64::from(T_DEN)).ok_or_else(bad)?;
                if denominator <= 0 || units % denominator != 0 {
                    return Err(format!(
                        "translation '{term}' in '{text}' is no multiple of 1/{T_DEN}"
                    ));
                }
                let reduced = (units / denominator).rem_euclid(i64::from(T_DEN));
                // reduced lies in [0, T_DEN)
                constant += sign * i32::try_from(reduced).unwrap_or(0);
            }
        }
    }
    Ok((coefficients, constant.rem_euclid(T_DEN)))
}

fn triplet_component(row: [i32; 3], tran: i32) -> String {
    let mut out = String::new();
    for (coefficient, name) in row.iter().zip(['x', 'y', 'z']) {
        match *coefficient {
            0 => continue,
            1 if out.is_empty() => {}
            1 => out.push('+'),
            -1 => out.push('-'),
            c if c > 0 && !out.is_empty() => out.push_str(&format!("+{c}")),
            c => out.push_str(&c.to_string()),
        }
        out.push(name);
    }
    let tran = tran.rem_euclid(T_DEN);
    if tran != 0 {
        let divisor = gcd(tran, T_DEN);
        if !out.is_empty() {
            out.push('+');
        }
        out.push_str(&format!("{}/{}", tran / divisor, T_DEN / divisor));
    }
    if out.is_empty() {
        out.push('0');
    }
    out
}

fn gcd(a: i32, b: i32) -> i32 {
    if b == 0 {
        a.abs()
    } else {
        gcd(b, a % b)
    }
}

// ---------------------------------------------------------------------------
// Looking settings up

/// Short symbols of the ITA 2002 e-glide notation, for the standard setting of
/// their group (the old symbol with a or b glide). Other settings have several
/// old symbols per e-symbol and are left to the old ones.
const E_GLIDE_SYMBOLS: [(&str, &str); 5] =
    [("aem2", "abm2"), ("aea2", "aba2"), ("cmce", "cmca"), ("cmme", "cmma"), ("ccce", "ccca")];

fn strip_prefix_ignoring_case<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let head = text.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix).then(|| &text[prefix.len()..])
}

/// The key an H-M symbol (without suffix) is looked up by, and the setting
/// suffix it implies (the PDB's H lattice means ":H").
///
/// Keys drop spaces, parentheses and case: no two settings' symbols differ
/// only in those. A spaced full symbol is first reduced to the short one.
fn hm_lookup_key(symbol: &str) -> (String, Option<&'static str>) {
    let mut tokens: Vec<String> = symbol.split_whitespace().map(str::to_string).collect();
    let mut implied_suffix = None;
    if let Some(first) = tokens.first_mut() {
        if first.starts_with(['H', 'h']) {
            first.replace_range(..1, "R");
            implied_suffix = Some("h");
        }
    }
    if tokens.len() > 1 {
        shorten_full_symbol(&mut tokens[1..]);
    }
    let key: String = tokens
        .concat()
        .chars()
        .filter(|c| !c.is_whitespace() && *c != '(' && *c != ')')
        .map(|c| c.to_ascii_lowercase())
        .collect();
    let key = match E_GLIDE_SYMBOLS.iter().find(|(new, _)| *new == key) {
        Some((_, old)) => old.to_string(),
        None => key,
    };
    (key, implied_suffix)
}

/// Turns the symmetry directions of a full H-M symbol ("2/m 2/m 2/m",
/// "4/m -3 2/m", "6/m 2/m 2/c") into those of the short one ("m m m",
/// "m -3 m", "6/m m c"): beyond the first direction a rotation under a plane
/// drops; in the first it drops only for orthorhombic and cubic groups.
/// Monoclinic symbols ("1 2/m 1") are the same full and short.
fn shorten_full_symbol(directions: &mut [String]) {
    let monoclinic = directions.len() == 3 && directions.iter().filter(|d| *d == "1").count() == 2;
    if monoclinic {
        return;
    }
    let orthorhombic = directions.len() == 3 && directions[0].starts_with('2');
    let cubic = directions.get(1).is_some_and(|d| d == "-3");
    for (position, direction) in directions.iter_mut().enumerate() {
        if position == 0 && !orthorhombic && !cubic {
            continue;
        }
        if let Some((_, plane)) = direction.split_once('/') {
            *direction = plane.to_string();
        }
    }
}

/// The lookup key of each setting's H-M symbol (short monoclinic symbols for
/// the unique-axis-b settings too), to the settings in table order.
fn hm_index() -> &'static HashMap<String, Vec<usize>> {
    static INDEX: OnceLock<HashMap<String, Vec<usize>>> = OnceLock::new();
    INDEX.get_or_init(|| {
        let mut index: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, setting) in SETTINGS.iter().enumerate() {
            let bare = setting.hm.split(':').next().unwrap_or(setting.hm);
            index.entry(hm_lookup_key(bare).0).or_default().push(i);
            let parts: Vec<&str> = bare.split_whitespace().collect();
            if let [lattice, "1", direction, "1"] = parts[..] {
                index
                    .entry(hm_lookup_key(&format!("{lattice} {direction}")).0)
                    .or_default()
                    .push(i);
            }
        }
        index
    })
}

fn rows_of_number(text: &str) -> Result<Vec<usize>, String> {
    let number: u16 =
        text.parse().map_err(|_| format!("'{text}' is not a number from 1 to 230"))?;
    let rows: Vec<usize> = (0..SETTINGS.len()).filter(|&i| SETTINGS[i].number == number).collect();
    if rows.is_empty() {
        return Err(format!("{number} is not a space-group number (1 to 230)"));
    }
    Ok(rows)
}

/// The setting among `candidates` (table rows, in table order) that the
/// lowercase suffixes select, the first one left. A suffix is an origin
/// choice or axes ("1", "2", "h", "r", matched against the suffix of the H-M
/// symbol) or a qualifier ("b1", "cab", …). A qualifier picks among all
/// settings of the group, as in "P 21/c :b2" (= P 1 21/n 1): the symbol then
/// only names the group.
fn select_setting(candidates: &[usize], suffixes: &[String]) -> Result<usize, String> {
    let Some(&first) = candidates.first() else {
        return Err("no setting matches".into());
    };
    let number = SETTINGS[first].number;
    let (origin_or_axes, qualifiers): (Vec<&String>, Vec<&String>) =
        suffixes.iter().partition(|s| matches!(s.as_str(), "1" | "2" | "h" | "r"));
    let mut rows: Vec<usize> = match qualifiers[..] {
        [] => candidates.to_vec(),
        [qualifier] => (0..SETTINGS.len())
            .filter(|&i| {
                SETTINGS[i].number == number
                    && SETTINGS[i].qualifier.eq_ignore_ascii_case(qualifier)
            })
            .collect(),
        _ => return Err("more than one setting qualifier".into()),
    };
    for suffix in origin_or_axes {
        rows.retain(|&i| {
            SETTINGS[i].hm.rsplit_once(':').is_some_and(|(_, s)| s.eq_ignore_ascii_case(suffix))
        });
    }
    rows.first().copied().ok_or_else(|| {
        let offered: Vec<&str> =
            SETTINGS.iter().filter(|s| s.number == number).map(|s| s.hm).collect();
        let given: Vec<String> = suffixes.iter().map(|s| format!(":{s}")).collect();
        format!(
            "'{}' selects none of the settings of group {number} ({})",
            given.concat(),
            offered.join(", ")
        )
    })
}

/// The operators of every setting, sorted, parsed once (for naming the
/// group of a Hall symbol that is not spelled as in the table).
fn table_operators() -> &'static [Vec<SymOp>] {
    static OPERATORS: OnceLock<Vec<Vec<SymOp>>> = OnceLock::new();
    OPERATORS.get_or_init(|| {
        SETTINGS
            .iter()
            .map(|setting| {
                // the table's symbols all parse (tested); an empty set matches nothing
                let mut ops = operators_of_hall(setting.hall).unwrap_or_default();
                ops.sort_unstable();
                ops
            })
            .collect()
    })
}

/// The number and H-M symbol of the tabulated setting with these operators,
/// or with these operators after an origin shift (which the symbol then
/// names); `None` if there is none.
fn identify(ops: &[SymOp]) -> Option<(u16, String)> {
    let mut sorted = ops.to_vec();
    sorted.sort_unstable();
    let table = table_operators();
    if let Some(i) = table.iter().position(|t| *t == sorted) {
        return Some((SETTINGS[i].number, SETTINGS[i].hm.to_string()));
    }
    let mut rotations: Vec<[[i32; 3]; 3]> = sorted.iter().map(|op| op.rot).collect();
    rotations.sort_unstable();
    for (i, tabulated) in table.iter().enumerate() {
        if tabulated.len() != sorted.len() {
            continue;
        }
        let mut tabulated_rotations: Vec<[[i32; 3]; 3]> =
            tabulated.iter().map(|op| op.rot).collect();
        tabulated_rotations.sort_unstable();
        if tabulated_rotations != rotations {
            continue;
        }
        let lookup: HashSet<SymOp> = tabulated.iter().copied().collect();
        if let Some(shift) = origin_shift(&sorted, &lookup) {
            let basis = SymOp::new(IDENTITY_ROTATION, shift);
            return Some((SETTINGS[i].number, format!("{} ({})", SETTINGS[i].hm, basis.triplet())));
        }
    }
    None
}

/// The smallest shift s (1/[`T_DEN`]) with every operator (R, t) of `ops`
/// equal to (R, t₀ + (I − R)·s) for some (R, t₀) of `tabulated`: `ops` are
/// the tabulated group with its origin moved, as a Hall change of basis
/// (x+s) would move it.
fn origin_shift(ops: &[SymOp], tabulated: &HashSet<SymOp>) -> Option<[i32; 3]> {
    let grid = 0..T_DEN;
    for s0 in grid.clone() {
        for s1 in grid.clone() {
            for s2 in grid.clone() {
                let s = [s0, s1, s2];
                let matches = ops.iter().all(|op| {
                    let moved = mat_vec(&op.rot, s);
                    let original =
                        SymOp::new(op.rot, std::array::from_fn(|i| op.tran[i] - s[i] + moved[i]));
                    tabulated.contains(&original)
                });
                if matches {
                    return Some(s);
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// Every setting of ITB Table A1.4.2.7 with gemmi's operators, written by
    /// scripts/space_group_reference.py.
    const REFERENCE: &str = include_str!("../../tests/data/space_groups.txt");

    struct Reference {
        number: u16,
        hm: String,
        hall: String,
        ops: BTreeSet<SymOp>,
    }

    fn reference_settings() -> Vec<Reference> {
        let mut out = Vec::new();
        let mut lines = REFERENCE.lines().filter(|l| !l.starts_with('#'));
        while let Some(first) = lines.next() {
            let number =
                first.strip_prefix("setting ").expect("setting line").parse().expect("number");
            let mut field = |name: &str| {
                let line = lines.next().expect("block is complete");
                line.strip_prefix(name).expect("field in order").to_string()
            };
            let hm = field("hm ");
            let hall = field("hall ");
            let ops = field("ops ")
                .split(' ')
                .map(|t| SymOp::from_triplet(t).expect("gemmi's triplet parses"))
                .collect();
            out.push(Reference { number, hm, hall, ops });
        }
        out
    }

    fn group(symbol: &str) -> SpaceGroup {
        SpaceGroup::from_symbol(symbol).unwrap_or_else(|e| panic!("{e}"))
    }

    fn op_set(g: &SpaceGroup) -> BTreeSet<SymOp> {
        g.ops().iter().copied().collect()
    }

    fn centring_count(g: &SpaceGroup) -> usize {
        g.ops().iter().filter(|op| op.rot == IDENTITY_ROTATION).count()
    }

    #[test]
    fn hall_symbols_give_gemmis_operators_for_every_setting() {
        let reference = reference_settings();
        assert_eq!(reference.len(), 530);
        let table: Vec<_> = settings().collect();
        assert_eq!(table.len(), reference.len());
        for (r, &(number, hm, hall)) in reference.iter().zip(&table) {
            assert_eq!((r.number, r.hm.as_str(), r.hall.as_str()), (number, hm, hall));
            let g = SpaceGroup::from_hall(&r.hall).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(op_set(&g), r.ops, "{hm} ({hall})");
            assert_eq!(g.ops().len(), r.ops.len(), "{hm}: duplicate operators");
            assert_eq!(g.ops()[0], SymOp::IDENTITY);
            // C c c a:1 and C c c b:1 (and their A, B relatives) are one group
            // under two names, with one Hall symbol: a Hall symbol names the first
            let named = table.iter().find(|t| t.2 == hall).map_or(hm, |t| t.1);
            assert_eq!((g.number(), g.hm(), g.hall()), (number, named, hall));
            let by_name = group(hm);
            assert_eq!((by_name.number(), by_name.hm(), by_name.hall()), (number, hm, hall));
            assert_eq!(by_name.ops(), g.ops(), "from_symbol({hm})");
        }
        let shared: Vec<&str> = table
            .iter()
            .filter(|t| table.iter().filter(|u| u.2 == t.2).count() > 1)
            .map(|t| t.1)
            .collect();
        assert_eq!(
            shared,
            ["C c c a:1", "C c c b:1", "A b a a:1", "A c a a:1", "B b c b:1", "B b a b:1"]
        );
    }

    #[test]
    fn hall_symbols_spelled_otherwise_are_identified_by_their_operators() {
        // extra spaces, and a generator set different from the table's
        let g = SpaceGroup::from_hall("  P 2ac   2ab ").unwrap();
        assert_eq!((g.number(), g.hm(), g.hall()), (19, "P 21 21 21", "P 2ac 2ab"));
        let g = SpaceGroup::from_hall("P 2ac 2ab 1").unwrap();
        assert_eq!((g.number(), g.hm()), (19, "P 21 21 21"));
        let g = SpaceGroup::from_hall("P 2ac 2ab (1 0 0)").unwrap();
        assert_eq!((g.number(), g.hm()), (19, "P 21 21 21 (x+1/12,y,z)"));
        let g = SpaceGroup::from_hall("P 2ac 2ab (x+1/12,y,z)").unwrap();
        assert_eq!(g.hm(), "P 21 21 21 (x+1/12,y,z)");
        // a permutation of axes is another tabulated setting
        let g = SpaceGroup::from_hall("P 2yb (z,x,y)").unwrap();
        assert_eq!(g.number(), 4);
    }

    #[test]
    fn pdb_spellings() {
        let cases: [(&str, u16, &str, usize); 17] = [
            ("P 1 21 1", 4, "P 1 21 1", 2),
            ("P 21", 4, "P 1 21 1", 2),
            ("H 3", 146, "R 3:H", 9),
            ("H 3 2", 155, "R 3 2:H", 18),
            ("H -3", 148, "R -3:H", 18),
            ("H -3 m", 166, "R -3 m:H", 36),
            ("I 1 2 1", 5, "I 1 2 1", 4),
            ("I 2", 5, "I 1 2 1", 4),
            ("P 21 21 21", 19, "P 21 21 21", 4),
            ("C 1 2 1", 5, "C 1 2 1", 4),
            ("C 2", 5, "C 1 2 1", 4),
            ("P 43 21 2", 96, "P 43 21 2", 8),
            ("R 3", 146, "R 3:H", 9),
            ("R 3 2", 155, "R 3 2:H", 18),
            ("P 1", 1, "P 1", 1),
            ("P -1", 2, "P -1", 2),
            ("p212121", 19, "P 21 21 21", 4),
        ];
        for (symbol, number, hm, count) in cases {
            let g = group(symbol);
            assert_eq!((g.number(), g.hm(), g.ops().len()), (number, hm, count), "{symbol}");
        }
        assert_eq!(group("H 3"), group("R 3:H"));
        assert_eq!(group("h 3 2"), group("R 3 2 :H"));
        assert_eq!(group("P 61 2 2").number(), 178);
        assert_eq!(group("P 65 2 2").number(), 179);
        assert_eq!(group("P6122").hm(), "P 61 2 2");
    }

    #[test]
    fn symbols_with_settings_numbers_and_full_forms() {
        assert_eq!(group("R 3:R").hall(), "P 3*");
        assert_eq!(group("r 3 :r").ops().len(), 3);
        assert_eq!(group("P n n n").hm(), "P n n n:1");
        assert_eq!(group("P n n n:2").hall(), "-P 2ab 2bc");
        assert_eq!(group("Pnnn:2"), group("48:2"));
        assert_eq!(group("19"), group("P 21 21 21"));
        assert_eq!(group("146"), group("R 3:H"));
        assert_eq!(group("P 21/c").hm(), "P 1 21/c 1");
        assert_eq!(group("P 21/n").hm(), "P 1 21/n 1");
        assert_eq!(group("P 21/c :b2").hm(), "P 1 21/n 1");
        assert_eq!(group("14:c1").hm(), "P 1 1 21/a");
        assert_eq!(group("P 21 21 2:cab").hm(), "P 2 21 21");
        assert_eq!(group("C c c b:2").hall(), "-C 2a 2c");
        assert_eq!(group("P 2/m 2/m 2/m").hm(), "P m m m");
        assert_eq!(group("P 21/b 21/c 21/a").hm(), "P b c a");
        assert_eq!(group("P 4/m 2/m 2/m").hm(), "P 4/m m m");
        assert_eq!(group("P 42/n 2/b 2/c").hm(), "P 42/n b c:1");
        assert_eq!(group("F 4/m -3 2/m").hm(), "F m -3 m");
        assert_eq!(group("I 41/a -3 2/d").hm(), "I a -3 d");
        assert_eq!(group("P 2/m -3").hm(), "P m -3");
        assert_eq!(group("P 63/m 2/m 2/c").hm(), "P 63/m m c");
        assert_eq!(group("P -3 2/m 1").hm(), "P -3 m 1");
        assert_eq!(group("R -3 2/c").hm(), "R -3 c:H");
        assert_eq!(group("C m c e").hm(), "C m c a");
        assert_eq!(group("Ccce:2").hm(), "C c c a:2");
        assert_eq!(group("P 2(1) 2(1) 2(1)").number(), 19);
        assert_eq!(group("Hall: -P 2ac 2n").hm(), "P n m a");
        assert_eq!(group("hall:P 2yb").hm(), "P 1 21 1");
    }

    #[test]
    fn bad_symbols_are_errors() {
        for symbol in [
            "P 7",
            "X 1",
            "",
            "   ",
            "0",
            "231",
            "P 21 21 21:2",
            "P 21 21 21:",
            "H 3:R",
            "R 3:X",
            "P n n n:3",
            ":1",
            "Hall: Q 2",
            "Hall: P 7",
            "Hall: P 2q",
            "Hall: P 2 (0 0",
            "Hall: P 2 (0 0 1) x",
            "Hall: P 2 (1 2)",
            "Hall: P 2 (2x,y,z)",
            "Hall: P 4 -2 -2",
            "Hall: P 3 4",
            "Hall: P 3 4x",
            "Hall: P 2 2 2 2 2",
            "P 21/c:b1:c1",
            "Hall: P 2aa",
            "Hall: P 2xy",
            "Hall: P 4\"",
            "Hall: P 27",
            "Hall: -",
            "Hall:",
        ] {
            let err = SpaceGroup::from_symbol(symbol).expect_err(symbol);
            assert!(err.to_string().contains(err.problem()), "{err}");
            assert!(!err.problem().is_empty());
        }
        let err = SpaceGroup::from_symbol("P 7").unwrap_err();
        assert_eq!(err.symbol(), "P 7");
        assert!(err.to_string().starts_with("space group 'P 7': "), "{err}");
        assert!(SpaceGroup::from_hall("P 2yb )").is_err());
        assert!(SpaceGroup::from_hall("-P 2ac 2n q").is_err());
    }

    #[test]
    fn systematic_absences() {
        let p212121 = group("P 21 21 21");
        for n in 1..6 {
            let odd = n % 2 == 1;
            assert_eq!(p212121.is_systematically_absent([n, 0, 0]), odd);
            assert_eq!(p212121.is_systematically_absent([0, n, 0]), odd);
            assert_eq!(p212121.is_systematically_absent([0, 0, n]), odd);
            assert_eq!(p212121.is_systematically_absent([-n, 0, 0]), odd);
        }
        assert!(!p212121.is_systematically_absent([1, 1, 1]));
        assert!(!p212121.is_systematically_absent([1, 1, 0]));
        assert!(!p212121.is_systematically_absent([0, 0, 0]));

        let i222 = group("I 2 2 2");
        let c2 = group("C 2");
        let p21 = group("P 21");
        let p61 = group("P 61");
        for h in -3..=3 {
            for k in -3..=3 {
                for l in -3..=3 {
                    let hkl = [h, k, l];
                    assert_eq!(i222.is_systematically_absent(hkl), (h + k + l) % 2 != 0, "{hkl:?}");
                    assert_eq!(c2.is_systematically_absent(hkl), (h + k) % 2 != 0, "{hkl:?}");
                    let screw_absent = h == 0 && l == 0 && k % 2 != 0;
                    assert_eq!(p21.is_systematically_absent(hkl), screw_absent, "{hkl:?}");
                }
            }
        }
        for l in -12..=12 {
            assert_eq!(p61.is_systematically_absent([0, 0, l]), l % 6 != 0, "00{l}");
        }
        // c glide of P 1 c 1: h0l with l odd
        let pc = group("P c");
        assert!(pc.is_systematically_absent([1, 0, 1]));
        assert!(!pc.is_systematically_absent([1, 1, 1]));
        assert!(!pc.is_systematically_absent([1, 0, 2]));
        // obverse R on hexagonal axes: -h+k+l = 3n
        let r3 = group("H 3");
        assert!(!r3.is_systematically_absent([1, 0, 1]));
        assert!(r3.is_systematically_absent([1, 0, 0]));
        assert!(!r3.is_systematically_absent([0, 1, 2]));
    }

    #[test]
    fn general_reflection_has_one_equivalent_per_point_operator() {
        for (_, hm, _) in settings() {
            let g = group(hm);
            let point_group_order = g.ops().len() / centring_count(&g);
            let h = [7, 3, 11];
            let equivalents = g.equivalents(h);
            assert_eq!(equivalents.len(), point_group_order, "{hm}");
            assert_eq!(equivalents[0], (h, 0.0), "{hm}");
            let friedel = equivalents.iter().any(|(k, _)| *k == [-7, -3, -11]);
            assert_eq!(friedel, g.is_centrosymmetric(), "{hm}");
        }
    }

    #[test]
    fn equivalents_carry_the_phase_of_the_operator() {
        // P 21: (-x, y+1/2, -z) maps (h k l) to (-h k -l) with phase k/2
        let g = group("P 21");
        let found = g.equivalents([1, 1, 1]);
        assert_eq!(found, vec![([1, 1, 1], 0.0), ([-1, 1, -1], 0.5)]);
        let found = g.equivalents([1, 2, 1]);
        assert_eq!(found[1], ([-1, 2, -1], 0.0));
        // special reflection: fewer equivalents
        assert_eq!(group("P 4").equivalents([0, 0, 3]).len(), 1);
        assert_eq!(group("P 4").equivalents([1, 0, 3]).len(), 4);
        // P 61: the n-th power of the screw rotation shifts by n/6 along c
        let p61 = group("P 61");
        assert_eq!(p61.equivalents([0, 0, 1]), vec![([0, 0, 1], 0.0)]);
        let mut sixths: Vec<i64> = p61
            .equivalents([1, 0, 1])
            .iter()
            .map(|(_, phase)| (phase * 6.0).round() as i64)
            .collect();
        sixths.sort_unstable();
        assert_eq!(sixths, [0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn operators_apply_and_print() {
        let op = SymOp::from_triplet("-y+1/4, x-y ,z+3/4").unwrap();
        assert_eq!(op.rot, [[0, -1, 0], [1, -1, 0], [0, 0, 1]]);
        assert_eq!(op.tran, [6, 0, 18]);
        assert_eq!(op.triplet(), "-y+1/4,x-y,z+3/4");
        assert_eq!(op.to_string(), op.triplet());
        assert_eq!(op.translation(), [0.25, 0.0, 0.75]);
        assert_eq!(op.apply([0.5, 0.25, 0.0]), [0.0, 0.25, 0.75]);
        assert_eq!(SymOp::from_triplet("x-1/2,1/3+y,-z-1").unwrap().tran, [12, 8, 0]);
        assert_eq!(SymOp::from_triplet("X,Y,Z").unwrap(), SymOp::IDENTITY);
        assert_eq!(SymOp::from_triplet("2x,y,-z").unwrap().triplet(), "2x,y,-z");
        assert_eq!(SymOp::from_triplet("1/2,y,z").unwrap().triplet(), "1/2,y,z");
        assert_eq!(SymOp::new([[0; 3]; 3], [0; 3]).triplet(), "0,0,0");
        for bad in ["x,y", "x,y,z,x", "x,y,q", "x,y,z+1/5", "x,,z", "x,y,z+", "x/2,y,z", "1/0,y,z"]
        {
            assert!(SymOp::from_triplet(bad).is_err(), "{bad}");
        }
        // h·R as a row vector: (h k l)·R for -y,x-y,z is (k, -h-k, l)
        assert_eq!(op.hkl([1, 2, 3]), [2, -3, 3]);
        assert_eq!(op.phase_shift([1, 0, 1]), 0.0);
        assert_eq!(op.phase_shift([1, 0, 0]), 0.25);
        assert_eq!(op.phase_shift([-1, 0, 0]), 0.75);
    }

    #[test]
    fn phase_shift_relates_structure_factors() {
        // an atom set closed under P 21 21 21: F(hR) = F(h)·exp(-2πi h·t)
        let g = group("P 21 21 21");
        let site = [0.1, 0.23, 0.37];
        let atoms: Vec<[f64; 3]> = g.ops().iter().map(|op| op.apply(site)).collect();
        let f = |h: [i32; 3]| {
            atoms.iter().fold((0.0, 0.0), |(re, im), x| {
                let angle =
                    std::f64::consts::TAU * (0..3).map(|i| f64::from(h[i]) * x[i]).sum::<f64>();
                (re + angle.cos(), im + angle.sin())
            })
        };
        let h = [1, 2, 3];
        let (re, im) = f(h);
        for (k, phase) in g.equivalents(h) {
            let (a, b) = (std::f64::consts::TAU * phase).sin_cos();
            // F(h)·exp(-2πiφ) = (re + i im)(cos − i sin)
            let expected = (re * b + im * a, im * b - re * a);
            let (kr, ki) = f(k);
            assert!((kr - expected.0).abs() < 1e-9 && (ki - expected.1).abs() < 1e-9, "{k:?}");
        }
    }
}
