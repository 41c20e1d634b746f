//! `muster explain queue NAME`: the queue tree, and for one queue its figures per resource,
//! how its fair share was reached (the division at every level of its path, step by step),
//! what it has borrowed or lent, and each pending gang of it with what it waits for, from
//! one cycle of the scheduler's own code over the cluster as read.

use std::fmt::Write as _;

use crate::config::Config;
use crate::convert::assemble::{ClusterObjects, assemble};
use crate::engine::admission::QueueState;
use crate::engine::admission::report::report;
use crate::engine::model::Snapshot;
use crate::engine::queues::QueueTree;
use crate::engine::queues::refusal::quantity;
use crate::engine::schedule;

/// The tree, indented, with `mark` after the queue being explained.
fn tree_lines(tree: &QueueTree, mark: usize, out: &mut String) {
    fn visit(tree: &QueueTree, q: usize, depth: usize, mark: usize, out: &mut String) {
        let queue = &tree.queues[q];
        let note = match (&queue.problem, q == mark) {
            (Some(problem), _) => format!("  (invalid: {problem})"),
            (None, true) => "  <-".to_string(),
            (None, false) => String::new(),
        };
        writeln!(out, "  {}{}{note}", "  ".repeat(depth), queue.spec.name).ok();
        for &c in &queue.children {
            visit(tree, c, depth + 1, mark, out);
        }
    }
    for &root in &tree.roots {
        visit(tree, root, 0, mark, out);
    }
    for (q, queue) in tree.queues.iter().enumerate() {
        if queue.problem.is_some() && !tree.roots.contains(&q) && queue.parent.is_none() {
            visit(tree, q, 0, mark, out);
        }
    }
}

/// Explains queue `name` over objects already read; `None` when no such queue exists.
pub fn explain_queue(objects: &ClusterObjects, config: &Config, name: &str, now: i64) -> Option<String> {
    let assembled = assemble(objects, config, now);
    let snapshot: &Snapshot = &assembled.snapshot;
    let tree = &snapshot.queues;
    let q = tree.get(name)?;
    let queue = &tree.queues[q];
    let names = &snapshot.resources;
    let mut out = String::new();
    let parent = queue.spec.parent.as_deref().unwrap_or("none, top level");
    writeln!(out, "queue {name} (parent: {parent}, priority {})", queue.spec.priority).ok();
    if queue.implicit {
        writeln!(out, "  added by Muster: no Queue object named {name} exists; no quota, no limit").ok();
    }
    if let Some(origin) = &queue.spec.origin {
        writeln!(out, "  imported from {origin}").ok();
    }
    for note in &queue.spec.notes {
        writeln!(out, "  note: {note}").ok();
    }
    if let Some(problem) = &queue.problem {
        writeln!(out, "  invalid: {problem}; its gangs wait for it to be fixed").ok();
    }
    writeln!(out, "\ntree:").ok();
    tree_lines(tree, q, &mut out);

    // Figures and the fair share's making, from the cycle's starting picture.
    let mut state = QueueState::of(snapshot);
    let steps = state.divide(tree, true);
    for problem in &state.devices.problems {
        writeln!(out, "\nquota keys on devices: {problem}; the key counts none of them").ok();
    }
    let figures = report(snapshot, &state);
    let mine = figures.iter().find(|r| r.name == name);
    let path: Vec<usize> = tree.path(q).collect();
    for (k, &id) in tree.keys.iter().enumerate() {
        let resource = names.name(id);
        let amount = |v: i64| quantity(names, id, v);
        let Some((_, f)) = mine.and_then(|r| r.resources.iter().find(|(r, _)| *r == id)) else { continue };
        let quota = f.quota.map_or_else(|| "unlimited".to_string(), amount);
        let limit = f.limit.map_or_else(|| "none".to_string(), amount);
        writeln!(
            out,
            "\n{resource}: quota {quota}, limit {limit}, fair share {}, allocated {} ({} by non-preemptible gangs), requested {}",
            amount(f.fair_share),
            amount(f.allocated),
            amount(f.allocated_non_preemptible),
            amount(f.requested)
        )
        .ok();
        if f.borrowed > 0 {
            writeln!(out, "  borrowed {} beyond its quota: reclaimable when its owners need it", amount(f.borrowed))
                .ok();
        }
        if f.lent > 0 {
            writeln!(out, "  lent {} of its quota it does not use", amount(f.lent)).ok();
        }
        writeln!(out, "  how the fair share was reached, from the top:").ok();
        // The divisions among the siblings of each queue on the path, top level first.
        for &on_path in path.iter().rev() {
            let parent = tree.queues[on_path].parent;
            if let Some((_, _, division)) = steps.iter().find(|(p, key, _)| *p == parent && *key == k) {
                let level = parent
                    .map_or("the top level".to_string(), |p| format!("the children of {}", tree.queues[p].spec.name));
                writeln!(out, "    among {level}:").ok();
                for step in &division.steps {
                    writeln!(out, "      {step}").ok();
                }
            }
        }
    }

    // Its gangs: pending ones with their reasons from one cycle, running ones.
    let outcome = schedule(snapshot, &config.cycle());
    let pending: Vec<_> = snapshot.gangs.iter().filter(|g| tree.get(&g.queue) == Some(q)).collect();
    writeln!(out, "\npending gangs: {}", pending.len()).ok();
    for gang in pending {
        let why = outcome.waiting.iter().find(|w| w.gang == gang.key).map(ToString::to_string);
        let placed = outcome.placements.iter().any(|p| p.gang == gang.key);
        let line = match (why, placed) {
            (Some(why), _) => why,
            (None, true) => "fits now: the next cycle places it".to_string(),
            (None, false) => "not considered in this cycle".to_string(),
        };
        writeln!(out, "  {}: {line}", gang.key).ok();
    }
    let running: Vec<_> = snapshot.running.iter().filter(|r| tree.get(&r.queue) == Some(q)).collect();
    writeln!(out, "running gangs: {}", running.len()).ok();
    for gang in running {
        let kind = if gang.preemptible { "preemptible" } else { "non-preemptible" };
        writeln!(
            out,
            "  {}: {} pod(s), priority {}, {kind}, running since {}",
            gang.key,
            gang.pods.len(),
            gang.priority,
            crate::engine::clock::at(gang.first_started())
        )
        .ok();
    }
    for e in &outcome.evictions {
        let ours = |key| snapshot.running.iter().any(|r| &r.key == key && tree.get(&r.queue) == Some(q));
        if ours(&e.gang) {
            let what = format!("{} pod(s) of {} ({}) for {}", e.pods.len(), e.gang, e.reason.as_str(), e.preemptor);
            writeln!(out, "  a cycle now would evict {what}").ok();
        }
    }
    Some(out)
}
