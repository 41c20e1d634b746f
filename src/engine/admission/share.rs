//! Fair share (QUEUES.md §2.3): at each level of the tree, capacity is divided among
//! sibling queues: first each one's quota, capped by what it wants (but never less than
//! the part of its quota it does not lend); then the surplus, by priority bucket and in
//! proportion to `overQuotaWeight`, in whole units, leftovers by largest remainder.
//!
//! One resource key at a time; amounts are whole numbers in the engine's units.

use std::fmt::Write;

/// One queue at one level, for one resource key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claimant<'a> {
    pub name: &'a str,
    /// None: unlimited.
    pub quota: Option<i64>,
    pub weight_milli: u64,
    /// Quota that is never lent.
    pub kept: i64,
    pub priority: i32,
    /// What it wants, capped by its limit (`D`).
    pub demand: i64,
}

/// The shares of one level, in the claimants' order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Division {
    pub shares: Vec<i64>,
    /// The quotas (capped by demand) did not fit in the capacity.
    pub oversubscribed: bool,
    /// How the shares were reached, step by step, when asked for.
    pub steps: Vec<String>,
}

/// Divides `capacity` among `claimants`, given in tie-break order (older first, then by
/// name). With `trace`, records each step in words.
pub fn divide(capacity: i64, claimants: &[Claimant<'_>], trace: Option<i64>) -> Division {
    let n = claimants.len();
    let mut out = Division { shares: vec![0; n], oversubscribed: false, steps: Vec::new() };
    let capacity = capacity.max(0);
    let note = |steps: &mut Vec<String>, text: String| {
        if trace.is_some() {
            steps.push(text);
        }
    };
    // Amounts as the tree keeps them, in the key's units (GPUs are kept in thousandths).
    let units = |amount: i64| crate::engine::queues::refusal::in_units(amount, trace.unwrap_or(1));

    // Phase 1: what each deserves.
    let deserved: Vec<i64> = claimants
        .iter()
        .map(|c| c.quota.map_or(c.demand.min(capacity), |q| q.min(c.demand)).max(c.kept).max(0))
        .collect();
    if deserved.iter().sum::<i64>() <= capacity {
        out.shares.clone_from(&deserved);
    } else {
        out.oversubscribed = true;
        let mut left = capacity;
        for bucket in buckets(claimants) {
            let want: i64 = bucket.iter().map(|&i| deserved[i]).sum();
            if want <= left {
                for &i in &bucket {
                    out.shares[i] = deserved[i];
                }
                left -= want;
                continue;
            }
            // The bucket that runs out: in proportion to what each deserves.
            let weights: Vec<i128> = bucket.iter().map(|&i| deserved[i] as i128).collect();
            for (k, amount) in proportional(left, &weights).into_iter().enumerate() {
                out.shares[bucket[k]] = amount;
            }
            left = 0;
        }
    }
    if trace.is_some() {
        let mut line = String::from("quota, capped by demand:");
        for (c, d) in claimants.iter().zip(&out.shares) {
            let _ = write!(line, " {} {}", c.name, units(*d));
        }
        if out.oversubscribed {
            let _ = write!(line, " (quotas exceed the {} available: scaled by priority)", units(capacity));
        }
        note(&mut out.steps, line);
    }
    let mut rest = capacity - out.shares.iter().sum::<i64>();

    // Phase 2: the surplus, bucket by bucket.
    for bucket in buckets(claimants) {
        if rest <= 0 {
            break;
        }
        // The remainder each unsatisfied queue was last owed, as (numerator, denominator).
        let mut owed: Vec<(i128, i128)> = vec![(0, 1); n];
        let mut round = 0;
        loop {
            let open: Vec<usize> = bucket
                .iter()
                .copied()
                .filter(|&i| out.shares[i] < claimants[i].demand && claimants[i].weight_milli > 0)
                .collect();
            if open.is_empty() || rest <= 0 {
                break;
            }
            round += 1;
            let total_weight: i128 = open.iter().map(|&i| claimants[i].weight_milli as i128).sum();
            let pool = rest as i128;
            let mut satisfied = false;
            let mut line = format!("surplus {}, round {round}:", units(rest));
            for &i in &open {
                let offered = pool * claimants[i].weight_milli as i128;
                let need = (claimants[i].demand - out.shares[i]) as i128;
                let give = if need * total_weight <= offered {
                    satisfied = true;
                    owed[i] = (0, 1);
                    need
                } else {
                    let whole = offered / total_weight;
                    owed[i] = (offered - whole * total_weight, total_weight);
                    whole
                };
                let give = (give as i64).min(rest);
                out.shares[i] += give;
                rest -= give;
                let _ = write!(line, " {} +{}", claimants[i].name, units(give));
            }
            note(&mut out.steps, line);
            if !satisfied {
                break;
            }
        }
        // Leftover units to the largest remainders among queues still wanting more.
        while rest > 0 {
            let best = bucket
                .iter()
                .copied()
                .filter(|&i| out.shares[i] < claimants[i].demand && owed[i].0 > 0)
                .reduce(|a, b| if owed[b].0 * owed[a].1 > owed[a].0 * owed[b].1 { b } else { a });
            let Some(i) = best else { break };
            out.shares[i] += 1;
            rest -= 1;
            owed[i] = (0, 1);
            note(&mut out.steps, format!("leftover {} to {} (largest remainder)", units(1), claimants[i].name));
        }
    }
    out
}

/// Claimant indices grouped by priority, highest first, each group in the given order.
fn buckets(claimants: &[Claimant<'_>]) -> Vec<Vec<usize>> {
    let mut priorities: Vec<i32> = claimants.iter().map(|c| c.priority).collect();
    priorities.sort_unstable_by(|a, b| b.cmp(a));
    priorities.dedup();
    priorities.into_iter().map(|p| (0..claimants.len()).filter(|&i| claimants[i].priority == p).collect()).collect()
}

/// `amount` split in proportion to `weights`, in whole units, leftovers by largest
/// remainder (earlier index on ties).
fn proportional(amount: i64, weights: &[i128]) -> Vec<i64> {
    let total: i128 = weights.iter().sum();
    if total == 0 {
        return vec![0; weights.len()];
    }
    let mut parts: Vec<i64> = weights.iter().map(|w| (amount as i128 * w / total) as i64).collect();
    let mut rest = amount - parts.iter().sum::<i64>();
    let mut by_remainder: Vec<usize> = (0..weights.len()).collect();
    by_remainder.sort_by_key(|&i| std::cmp::Reverse(amount as i128 * weights[i] % total));
    for i in by_remainder {
        if rest == 0 {
            break;
        }
        parts[i] += 1;
        rest -= 1;
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claimant(name: &str, quota: i64, weight: u64, demand: i64) -> Claimant<'_> {
        Claimant { name, quota: Some(quota), weight_milli: weight * 1000, kept: 0, priority: 100, demand }
    }

    #[test]
    fn the_worked_example_weights_one_to_three_share_six_and_ten() {
        // QUEUES.md §2.3: C = 16, quotas 4 and 4, weights 1 and 3, both want 16.
        let d = divide(16, &[claimant("a", 4, 1, 16), claimant("b", 4, 3, 16)], Some(1));
        assert_eq!(d.shares, vec![6, 10]);
        assert!(!d.oversubscribed);
        assert_eq!(d.steps, vec!["quota, capped by demand: a 4 b 4", "surplus 8, round 1: a +2 b +6"]);
    }

    #[test]
    fn a_lending_limit_keeps_the_owners_headroom_idle() {
        // QUEUES.md §2.4 (Kueue's example): team-b has 12 with lendingLimit 1 and wants
        // nothing; team-a (9) can reach only 9 + 1.
        let mut b = claimant("team-b", 12, 1, 0);
        b.kept = 11;
        let d = divide(21, &[claimant("team-a", 9, 1, 21), b], None);
        assert_eq!(d.shares, vec![10, 11]);
    }

    #[test]
    fn demand_caps_the_share_and_the_rest_flows_to_who_wants_it() {
        // b wants only 2 of its quota 8; a takes what b does not use.
        let d = divide(16, &[claimant("a", 8, 1, 16), claimant("b", 8, 1, 2)], None);
        assert_eq!(d.shares, vec![14, 2]);
        // An idle queue's quota is lent entirely.
        let d = divide(16, &[claimant("a", 8, 1, 16), claimant("b", 8, 1, 0)], None);
        assert_eq!(d.shares, vec![16, 0]);
    }

    #[test]
    fn a_satisfied_queue_hands_its_part_of_the_round_to_the_others() {
        // Surplus 12 in thirds: c wants only 1 more, so a and b split the rest 1:1.
        let d = divide(12, &[claimant("a", 0, 1, 100), claimant("b", 0, 1, 100), claimant("c", 0, 1, 1)], Some(1));
        assert_eq!(d.shares, vec![6, 5, 1]);
        assert_eq!(d.shares.iter().sum::<i64>(), 12);
        assert_eq!(d.steps.last().unwrap(), "leftover 1 to a (largest remainder)");
    }

    #[test]
    fn a_higher_priority_bucket_takes_the_surplus_first() {
        let mut high = claimant("high", 2, 1, 10);
        high.priority = 200;
        let d = divide(12, &[claimant("low", 2, 1, 10), high], None);
        assert_eq!(d.shares, vec![2, 10]);
    }

    #[test]
    fn weight_zero_gets_no_surplus_and_leftovers_go_to_the_largest_remainder() {
        let d = divide(10, &[claimant("none", 0, 0, 10), claimant("a", 0, 1, 10), claimant("b", 0, 2, 10)], None);
        // 10 in thirds: a 3.33, b 6.67 → 3 and 6, the leftover unit to b.
        assert_eq!(d.shares, vec![0, 3, 7]);
    }

    #[test]
    fn oversubscribed_quotas_are_served_by_priority_then_scaled() {
        let mut high = claimant("high", 6, 1, 6);
        high.priority = 200;
        let d = divide(10, &[claimant("a", 6, 1, 6), claimant("b", 2, 1, 2), high], None);
        assert!(d.oversubscribed);
        // high gets its 6; a and b share the remaining 4 in proportion 6:2.
        assert_eq!(d.shares, vec![3, 1, 6]);
    }

    #[test]
    fn an_unlimited_quota_deserves_its_demand_up_to_the_capacity() {
        let d = divide(8, &[Claimant { quota: None, ..claimant("kai", 0, 1, 20) }], None);
        assert_eq!(d.shares, vec![8]);
    }

    #[test]
    fn shares_never_exceed_the_capacity_nor_the_demand_beyond_the_kept_quota() {
        // A small exhaustive sweep of the properties QUEUES.md §2.3 names.
        for capacity in [0, 1, 7, 16] {
            for (qa, qb) in [(0, 0), (4, 4), (10, 10), (3, 9)] {
                for (da, db) in [(0, 0), (5, 20), (20, 20), (1, 2)] {
                    for (wa, wb) in [(1, 1), (1, 3), (0, 2)] {
                        let mut b = claimant("b", qb, wb, db);
                        b.kept = qb / 2;
                        let d = divide(capacity, &[claimant("a", qa, wa, da), b.clone()], None);
                        let total: i64 = d.shares.iter().sum();
                        assert!(total <= capacity, "{capacity} {qa} {qb} {da} {db}: {:?}", d.shares);
                        assert!(d.shares[0] <= da.max(0));
                        assert!(d.shares[1] <= db.max(b.kept));
                    }
                }
            }
        }
    }
}
