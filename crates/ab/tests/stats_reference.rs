//! loadterm-ab's statistics against reference values computed once with scipy
//! (fixtures/gen_reference.py → fixtures/reference.json).

use loadterm_ab::stats::{mann_whitney, median, median_ci, norm_sf, wilcoxon};
use serde_json::Value;

fn fixture() -> Value {
    serde_json::from_str(include_str!("fixtures/reference.json")).unwrap()
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn close(a: f64, b: f64, what: &str) {
    assert!(
        (a - b).abs() <= 1e-9 * b.abs().max(1e-12) + 1e-12,
        "{what}: {a} vs scipy {b}"
    );
}

#[test]
fn normal_tail() {
    for c in fixture()["norm_sf"].as_array().unwrap() {
        close(
            norm_sf(c["z"].as_f64().unwrap()),
            c["p"].as_f64().unwrap(),
            &format!("sf({})", c["z"]),
        );
    }
}

#[test]
fn median_and_order_statistic_ci() {
    for c in fixture()["median_ci"].as_array().unwrap() {
        let x = floats(&c["x"]);
        close(median(&x), c["median"].as_f64().unwrap(), "median");
        match (median_ci(&x), c["ci"].as_array()) {
            (None, None) => {}
            (Some((lo, hi)), Some(ci)) => {
                close(lo, ci[0].as_f64().unwrap(), "ci low");
                close(hi, ci[1].as_f64().unwrap(), "ci high");
            }
            (got, want) => panic!("n={}: {got:?} vs {want:?}", x.len()),
        }
    }
}

#[test]
fn wilcoxon_signed_rank() {
    for c in fixture()["wilcoxon"].as_array().unwrap() {
        let d = floats(&c["d"]);
        close(
            wilcoxon(&d).unwrap(),
            c["p"].as_f64().unwrap(),
            &format!("wilcoxon n={}", d.len()),
        );
    }
}

#[test]
fn mann_whitney_u() {
    for c in fixture()["mann_whitney"].as_array().unwrap() {
        let (x, y) = (floats(&c["x"]), floats(&c["y"]));
        close(
            mann_whitney(&x, &y).unwrap(),
            c["p"].as_f64().unwrap(),
            &format!("mwu {}x{}", x.len(), y.len()),
        );
    }
}
