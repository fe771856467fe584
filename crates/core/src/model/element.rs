//! Chemical elements by atomic number, hydrogen (1) to californium (98).

use std::fmt;

/// Symbols indexed by atomic number minus one, as they are capitalised in
/// chemistry texts (PDB files write them in capitals; lookups ignore case).
const SYMBOLS: [&str; 98] = [
    "H", "He", "Li", "Be", "B", "C", "N", "O", "F", "Ne", "Na", "Mg", "Al", "Si", "P", "S", "Cl",
    "Ar", "K", "Ca", "Sc", "Ti", "V", "Cr", "Mn", "Fe", "Co", "Ni", "Cu", "Zn", "Ga", "Ge", "As",
    "Se", "Br", "Kr", "Rb", "Sr", "Y", "Zr", "Nb", "Mo", "Tc", "Ru", "Rh", "Pd", "Ag", "Cd", "In",
    "Sn", "Sb", "Te", "I", "Xe", "Cs", "Ba", "La", "Ce", "Pr", "Nd", "Pm", "Sm", "Eu", "Gd", "Tb",
    "Dy", "Ho", "Er", "Tm", "Yb", "Lu", "Hf", "Ta", "W", "Re", "Os", "Ir", "Pt", "Au", "Hg", "Tl",
    "Pb", "Bi", "Po", "At", "Rn", "Fr", "Ra", "Ac", "Th", "Pa", "U", "Np", "Pu", "Am", "Cm", "Bk",
    "Cf",
];

/// A chemical element, held as its atomic number (always in `1..=98`).
///
/// Isotopes are not told apart: deuterium (`D`) reads as hydrogen, since both
/// scatter X-rays with the same single electron.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Element(u8);

impl Element {
    /// Hydrogen, which deuterium also maps to.
    pub const H: Element = Element(1);
    /// Carbon.
    pub const C: Element = Element(6);
    /// Nitrogen.
    pub const N: Element = Element(7);
    /// Oxygen.
    pub const O: Element = Element(8);

    /// The element of atomic number `z`, if `z` is in `1..=98`.
    pub fn from_atomic_number(z: u8) -> Option<Element> {
        (1..=SYMBOLS.len() as u8).contains(&z).then_some(Element(z))
    }

    /// The element a symbol names, ignoring case and surrounding blanks
    /// (`"FE"`, `"Fe"`, `" fe"`); `"D"` (deuterium) gives hydrogen. `None` for
    /// anything else, the empty string included.
    pub fn from_symbol(symbol: &str) -> Option<Element> {
        let s = symbol.trim();
        if s.eq_ignore_ascii_case("D") {
            return Some(Element::H);
        }
        SYMBOLS.iter().position(|sym| sym.eq_ignore_ascii_case(s)).map(|i| Element(i as u8 + 1))
    }

    /// The symbol, capitalised as in chemistry (`"Fe"`).
    pub fn symbol(self) -> &'static str {
        SYMBOLS[usize::from(self.0) - 1]
    }

    /// The atomic number (`1..=98`), which is also the electron count of the
    /// neutral atom.
    pub fn atomic_number(self) -> u8 {
        self.0
    }
}

impl fmt::Display for Element {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.symbol())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symbols_round_trip() {
        for z in 1..=98u8 {
            let e = Element::from_atomic_number(z).unwrap();
            assert_eq!(e.atomic_number(), z);
            assert_eq!(Element::from_symbol(e.symbol()), Some(e));
            assert_eq!(Element::from_symbol(&e.symbol().to_uppercase()), Some(e));
            assert_eq!(Element::from_symbol(&e.symbol().to_lowercase()), Some(e));
        }
        assert_eq!(Element::from_atomic_number(0), None);
        assert_eq!(Element::from_atomic_number(99), None);
    }

    #[test]
    fn known_symbols() {
        assert_eq!(Element::from_symbol("FE").unwrap().atomic_number(), 26);
        assert_eq!(Element::from_symbol("fe").unwrap().symbol(), "Fe");
        assert_eq!(Element::from_symbol(" C").unwrap(), Element::C);
        assert_eq!(Element::from_symbol("Cf").unwrap().atomic_number(), 98);
        assert_eq!(Element::from_symbol("U").unwrap().atomic_number(), 92);
        assert_eq!(Element::from_symbol("D"), Some(Element::H));
        assert_eq!(Element::from_symbol("d"), Some(Element::H));
        assert_eq!(Element::from_symbol("Xx"), None);
        assert_eq!(Element::from_symbol("Es"), None);
        assert_eq!(Element::from_symbol(""), None);
        assert_eq!(Element::from_symbol("  "), None);
        assert_eq!(Element::from_symbol("CAL"), None);
        assert_eq!(Element::from_symbol("é"), None);
        assert_eq!(Element::O.to_string(), "O");
        assert_eq!(Element::N.symbol(), "N");
    }
}
