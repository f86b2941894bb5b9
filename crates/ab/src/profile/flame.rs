//! The differential flame graph (inferno): each frame as wide as its ns per request in the
//! variant, red where the variant spends more there than the baseline, blue where less.

use anyhow::{Context, Result};
use std::collections::BTreeMap;

/// An SVG of `stacks` (stack → (baseline, variant) ns per request), without inferno's
/// interactive script (the HTML report shows it as an image, where no script runs).
pub(crate) fn differential_svg(
    title: &str,
    stacks: &BTreeMap<String, (u64, u64)>,
) -> Result<String> {
    let lines: Vec<String> = stacks
        .iter()
        .filter(|(_, (a, b))| a + b > 0)
        .map(|(s, (a, b))| format!("{s} {a} {b}"))
        .collect();
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = title.to_owned();
    opts.subtitle = Some(
        "width: the variant's ns per request; red: more than in the baseline, blue: less"
            .to_owned(),
    );
    opts.count_name = "ns per request".to_owned();
    opts.no_javascript = true;
    opts.deterministic = true;
    opts.image_width = Some(1000);
    let mut out = Vec::new();
    inferno::flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), &mut out)
        .context("drawing the flame graph")?;
    String::from_utf8(out).context("the flame graph is not UTF-8")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn more_in_the_variant_is_red_less_is_blue() {
        let mut stacks = BTreeMap::new();
        stacks.insert("p;main;spin".to_owned(), (0, 5000));
        stacks.insert("p;main;parse".to_owned(), (8000, 2000));
        stacks.insert("p;main;write".to_owned(), (10000, 10000));
        let svg = differential_svg("B − A", &stacks).unwrap();
        assert!(svg.starts_with("<?xml") && svg.contains("spin"));
        let fill = |name: &str| {
            let at = svg.find(&format!("<title>{name} (")).unwrap();
            let rest = &svg[at..];
            let f = rest.find("fill=\"").unwrap();
            rest[f + 6..].split('"').next().unwrap().to_owned()
        };
        let rgb = |s: String| -> Vec<u32> {
            s.trim_start_matches("rgb(")
                .trim_end_matches(')')
                .split(',')
                .map(|x| x.trim().parse().unwrap())
                .collect()
        };
        let (spin, parse) = (rgb(fill("spin")), rgb(fill("parse")));
        assert!(spin[0] > spin[2], "spin is red: {spin:?}");
        assert!(parse[2] > parse[0], "parse is blue: {parse:?}");
    }
}
