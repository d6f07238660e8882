//! The low and depleted alarms of a balance (an eSIM wallet, a group, a reseller
//! balance): each notifies once per crossing, and how it is re-armed is the one rule
//! where eSIM and group wallets differ. Pure: the wallet rules (`wallet`) and the
//! reseller balance (`account`) look at balances through it.

use crate::money;
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

/// How a low-balance alarm is re-armed: the one rule where eSIM and group wallets differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rearm {
    /// eSIM wallets and the reseller balance (decisions 15, 16 and 56): a credit re-arms
    /// the low alarm only when it leaves the balance showing the threshold or more; a
    /// check of the balance never re-arms it.
    AtThreshold,
    /// Groups (decisions 33 and 57): every fund re-arms the low alarm, whatever it
    /// leaves, and so does every check that finds the balance at or above the threshold.
    OnAnyFund,
}

/// What one look at a balance sends: each at most once per crossing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[must_use]
pub struct Alarms {
    /// `esim.balance_low` or `group.balance_low` is due.
    pub low: bool,
    /// `esim.balance_depleted` or `group.balance_depleted` is due.
    pub depleted: bool,
}

/// The low and depleted alarms of one balance (an eSIM wallet, a group, a reseller
/// balance). Serialized as its two flags, flattened into the record that holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CrossingAlarm {
    /// Armed: the next crossing below the low threshold notifies.
    low_armed: bool,
    /// The depleted alarm was sent and no credit has come since.
    depleted_sent: bool,
}

impl CrossingAlarm {
    /// Nothing sent, low not armed: a new eSIM wallet, never funded that high (decision 56).
    pub const UNARMED: CrossingAlarm = CrossingAlarm { low_armed: false, depleted_sent: false };
    /// Both silent until a credit: a balance at $0 by creation or by the reseller's choice.
    pub const DISARMED: CrossingAlarm = CrossingAlarm { low_armed: false, depleted_sent: true };

    /// Its two flags as the state writes them: (`low_armed`, `depleted_sent`).
    pub fn flags(self) -> (bool, bool) {
        (self.low_armed, self.depleted_sent)
    }

    /// The alarm of the two flags the state wrote.
    pub fn from_flags(low_armed: bool, depleted_sent: bool) -> CrossingAlarm {
        CrossingAlarm { low_armed, depleted_sent }
    }

    /// Looks at a balance: low when it shows less than `threshold` while armed, depleted
    /// when it is exactly 0 and that was not sent yet. Each fires once until re-armed.
    pub fn observe(&mut self, exact: Decimal, threshold: Decimal, rearm: Rearm) -> Alarms {
        assert!(exact >= Decimal::ZERO, "a balance is never negative");
        let below = money::displayed(exact) < threshold;
        if !below && rearm == Rearm::OnAnyFund {
            self.low_armed = true;
        }
        let alarms = Alarms { low: below && self.low_armed, depleted: exact.is_zero() && !self.depleted_sent };
        if alarms.low {
            self.low_armed = false;
        }
        if alarms.depleted {
            self.depleted_sent = true;
        }
        alarms
    }

    /// A credit brought the balance to `exact`: depleted is re-armed, low as `rearm` says.
    pub fn rearm(&mut self, exact: Decimal, threshold: Decimal, rearm: Rearm) {
        if rearm == Rearm::OnAnyFund || money::displayed(exact) >= threshold {
            self.low_armed = true;
        }
        if exact > Decimal::ZERO {
            self.depleted_sent = false;
        }
    }

    /// Silences both until the next credit (a balance emptied or started at $0).
    pub fn disarm(&mut self) {
        *self = CrossingAlarm::DISARMED;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(cents: i64) -> Decimal {
        Decimal::new(cents, 2)
    }

    #[test]
    fn esim_alarm_fires_once_per_crossing_and_only_a_high_fund_rearms() {
        let mut alarm = CrossingAlarm::UNARMED;
        // Funded only below $5: never low (decision 56), depleted at 0.
        alarm.rearm(d(300), d(500), Rearm::AtThreshold);
        assert_eq!(alarm.observe(d(100), d(500), Rearm::AtThreshold), Alarms { low: false, depleted: false });
        assert_eq!(alarm.observe(d(0), d(500), Rearm::AtThreshold), Alarms { low: false, depleted: true });
        assert_eq!(alarm.observe(d(0), d(500), Rearm::AtThreshold), Alarms::default());
        alarm.rearm(d(1000), d(500), Rearm::AtThreshold);
        assert_eq!(alarm.observe(d(499), d(500), Rearm::AtThreshold), Alarms { low: true, depleted: false });
        assert_eq!(alarm.observe(d(0), d(500), Rearm::AtThreshold), Alarms { low: false, depleted: true });
        // A check above the threshold does not re-arm an eSIM wallet.
        assert_eq!(alarm.observe(d(600), d(500), Rearm::AtThreshold), Alarms::default());
        assert_eq!(alarm.observe(d(400), d(500), Rearm::AtThreshold), Alarms::default());
    }

    #[test]
    fn group_alarm_rearms_on_any_fund_and_on_recovery() {
        let mut alarm = CrossingAlarm::DISARMED;
        alarm.rearm(d(100), d(1000), Rearm::OnAnyFund);
        assert_eq!(alarm.observe(d(90), d(1000), Rearm::OnAnyFund), Alarms { low: true, depleted: false });
        assert_eq!(alarm.observe(d(1000), d(1000), Rearm::OnAnyFund), Alarms::default());
        assert_eq!(alarm.observe(d(0), d(1000), Rearm::OnAnyFund), Alarms { low: true, depleted: true });
        alarm.disarm();
        assert_eq!(alarm.observe(d(0), d(0), Rearm::OnAnyFund), Alarms::default());
    }

    #[test]
    fn flattened_flags_keep_their_names() {
        let text = serde_json::to_string(&CrossingAlarm::DISARMED).unwrap();
        assert_eq!(text, r#"{"low_armed":false,"depleted_sent":true}"#);
    }
}
