//! Run colours: the palette a run's colour is drawn from when it is created, and a colour a
//! person sets, as `#rrggbb`.

use crate::{Error, Result};

/// 50 colours, no two closer than 10 CIEDE2000 units, readable on light and dark pages, in the
/// order a greedy farthest-first choice picked them (the first few are the most distinct). The
/// UI keeps the same list in `ui/lib/colors.js`.
pub const RUN_PALETTE: [&str; 50] = [
    "#2277bb", "#bbaa00", "#ff0022", "#ee66ff", "#007744", "#44bbbb", "#885577", "#886644", "#ff8800", "#00bb11",
    "#7733ff", "#dd9999", "#99aadd", "#ff0088", "#777700", "#227777", "#99aa77", "#00aaee", "#7777aa", "#aa5555",
    "#cc00bb", "#00bb88", "#cc5500", "#bb9966", "#bb77aa", "#9977ff", "#448800", "#aa7700", "#ff8866", "#bb2266",
    "#8855aa", "#009988", "#ff6677", "#bb99dd", "#88aa11", "#4466ff", "#dd9900", "#0088aa", "#bb7766", "#ff77bb",
    "#339955", "#bb3322", "#667744", "#5599ff", "#dd0044", "#995500", "#bb44ff", "#ff6611", "#ff11cc", "#bb7744",
];

/// The colour of the project's `ordinal`-th run (from 0): the palette in order, then again.
pub fn palette_color(ordinal: u64) -> &'static str {
    RUN_PALETTE[(ordinal % RUN_PALETTE.len() as u64) as usize]
}

/// A colour a person chose for a run: `#rrggbb`, kept in lower case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunColor(String);

impl RunColor {
    pub fn parse(field: &str, s: &str) -> Result<Self> {
        let hex = s.strip_prefix('#').filter(|h| h.len() == 6 && h.bytes().all(|b| b.is_ascii_hexdigit()));
        match hex {
            Some(h) => Ok(Self(format!("#{}", h.to_ascii_lowercase()))),
            None => Err(Error::new(field, format!("a colour is written #rrggbb (six hex digits), got {s:?}"))),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_are_six_hex_digits_kept_in_lower_case() {
        assert_eq!(RunColor::parse("color", "#A1b2C3").unwrap().as_str(), "#a1b2c3");
        for bad in ["a1b2c3", "#abc", "#a1b2c3d", "#ggg000", "", "#"] {
            let err = RunColor::parse("color", bad).unwrap_err();
            assert!(err.to_string().contains("#rrggbb"), "{bad}: {err}");
        }
    }

    #[test]
    fn the_palette_holds_distinct_colours_and_wraps_around() {
        let distinct: std::collections::HashSet<_> = RUN_PALETTE.iter().collect();
        assert_eq!(distinct.len(), RUN_PALETTE.len());
        assert_eq!(palette_color(0), RUN_PALETTE[0]);
        assert_eq!(palette_color(51), RUN_PALETTE[1]);
        assert!(RUN_PALETTE.iter().all(|c| RunColor::parse("c", c).is_ok()));
    }
}
