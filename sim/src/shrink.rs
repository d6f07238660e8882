//! Shrinking a failing trace: remove and simplify steps while the same checker still
//! fires when the trace is replayed from scratch (replays are deterministic, so "still
//! fires" is a plain function of the trace).

use crate::op::Op;

/// Most replays one shrink may spend (each replays at most the trace's length).
pub const MAX_REPLAYS: usize = 4_000;

/// Returns a trace, as short and simple as found, on which `fails` still holds.
/// `trace` itself must fail.
pub fn shrink(trace: &[Op], mut fails: impl FnMut(&[Op]) -> bool) -> Vec<Op> {
    let mut budget = MAX_REPLAYS;
    let mut try_trace = |candidate: &[Op], budget: &mut usize| -> bool {
        if *budget == 0 {
            return false;
        }
        *budget -= 1;
        fails(candidate)
    };
    let mut current = trace.to_vec();
    // Remove chunks, halving their size when nothing of that size can go.
    let mut chunk = (current.len() / 2).max(1);
    loop {
        let mut removed = false;
        let mut start = 0;
        while start < current.len() && budget > 0 {
            let end = (start + chunk).min(current.len());
            let candidate: Vec<Op> = current[..start].iter().chain(&current[end..]).cloned().collect();
            if try_trace(&candidate, &mut budget) {
                current = candidate;
                removed = true;
            } else {
                start += chunk;
            }
        }
        if budget == 0 || (chunk == 1 && !removed) {
            break;
        }
        if !removed {
            chunk = (chunk / 2).max(1);
        }
    }
    // Simplify what is left, one step at a time.
    let mut changed = true;
    while changed && budget > 0 {
        changed = false;
        for index in 0..current.len() {
            for simpler in current[index].simplifications() {
                let mut candidate = current.clone();
                candidate[index] = simpler;
                if try_trace(&candidate, &mut budget) {
                    current = candidate;
                    changed = true;
                    break;
                }
            }
        }
    }
    current
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_two_steps_that_matter() {
        let trace: Vec<Op> = (0..50).map(|i| Op::Advance { ms: 1_000 * (i + 1) }).collect();
        // "Fails" when the trace still holds both the 7 s and the 40 s advance.
        let has = |t: &[Op], ms: i64| t.contains(&Op::Advance { ms });
        let shrunk = shrink(&trace, |t| has(t, 7_000) && has(t, 40_000));
        assert_eq!(shrunk, vec![Op::Advance { ms: 7_000 }, Op::Advance { ms: 40_000 }]);
    }

    #[test]
    fn simplifies_the_steps_that_stay() {
        let trace = vec![Op::Advance { ms: 3_600_000 }];
        let shrunk = shrink(&trace, |t| matches!(t, [Op::Advance { ms }] if *ms >= 900_000));
        assert_eq!(shrunk, vec![Op::Advance { ms: 900_000 }]);
    }
}
