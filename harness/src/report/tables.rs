//! The share tables of summary.md and the merged report: per set of compared methods, each
//! collector's share of each method beside the truth and the error in points.

use std::collections::BTreeMap;

use model::Collection;

use crate::scenario::Scenario;

/// One table per distinct set of compared methods in the scenario's share expectations.
pub(crate) fn share_tables(
    scenario: &Scenario,
    collections: &[Collection],
    first_truth: &serde_json::Value,
    truth_by_collector: &BTreeMap<String, serde_json::Value>,
) -> Vec<super::ShareTable> {
    use crate::scenario::{CheckKind, ShareMode};
    // Per set of compared methods: its mode, the truth path per method, and the sample kind each
    // collector's expectation asked for (off-CPU rows count blocked time, not preemption).
    struct Set {
        among: Vec<String>,
        mode: ShareMode,
        kinds: BTreeMap<String, String>,
        /// Collectors held to truth in this set (others are held to a bound: no error column).
        scored: std::collections::BTreeSet<String>,
    }
    let mut sets: Vec<Set> = Vec::new();
    let mut truths: BTreeMap<String, String> = BTreeMap::new();
    let first = collections.first().map(|c| c.collector.clone()).unwrap_or_default();
    for e in &scenario.expectations {
        let collector = &e.collector;
        let (among, mode, kind, scored) = match &e.check {
            CheckKind::Share(s) => {
                truths.insert(s.method.clone(), s.truth.clone());
                (&s.among, &s.mode, &s.sample_kind, true)
            }
            CheckKind::ShareAtLeast(s) => (&s.among, &s.mode, &s.sample_kind, false),
            _ => continue,
        };
        let idx = match sets.iter().position(|s| &s.among == among) {
            Some(i) => i,
            None => {
                sets.push(Set {
                    among: among.clone(),
                    mode: *mode,
                    kinds: BTreeMap::new(),
                    scored: Default::default(),
                });
                sets.len() - 1
            }
        };
        if scored {
            sets[idx].scored.insert(collector.clone().unwrap_or_else(|| first.clone()));
        }
        if let Some(k) = kind {
            sets[idx].kinds.insert(collector.clone().unwrap_or_else(|| first.clone()), k.clone());
        }
    }
    let mut tables = Vec::new();
    for set in sets {
        let truth: Vec<Option<f64>> = set
            .among
            .iter()
            .map(|m| truths.get(m).and_then(|p| judge::truth_value(first_truth, p)).and_then(|v| v.as_f64()))
            // (the table's truth row is the first run's; each row's error uses its own run's truth)
            .collect();
        let mut rows = Vec::new();
        for c in collections.iter().filter(|c| !c.samples.is_empty()) {
            let kind = set.kinds.get(&c.collector).map(String::as_str);
            let mut shares = Vec::new();
            let mut samples = 0;
            for m in &set.among {
                let (v, n, _) = judge::share(c, m, &set.among, set.mode, kind).unwrap_or((0.0, 0, 0));
                shares.push(v);
                samples = n;
            }
            let own_truth = truth_by_collector.get(&c.collector).unwrap_or(first_truth);
            let error_pts = set
                .among
                .iter()
                .zip(&shares)
                .map(|(m, v)| {
                    if !set.scored.contains(&c.collector) {
                        return None;
                    }
                    let t = truths.get(m).and_then(|p| judge::truth_value(own_truth, p)).and_then(|x| x.as_f64());
                    t.map(|t| (v - t).abs() * 100.0)
                })
                .collect();
            let collector = match kind {
                Some(k) => format!("{} ({k})", c.collector),
                None => c.collector.clone(),
            };
            let kind_of = scenario.collectors.iter().find(|s| s.name() == c.collector).map(|s| s.kind());
            let measures = kind_of.map(super::collector_measures).unwrap_or_default().to_string();
            let truth = set
                .among
                .iter()
                .map(|m| truths.get(m).and_then(|p| judge::truth_value(own_truth, p)).and_then(|x| x.as_f64()))
                .collect();
            rows.push(super::ShareRow { collector, samples, shares, error_pts, measures, truth });
        }
        tables.push(super::ShareTable { columns: set.among, truth, rows });
    }
    tables
}

