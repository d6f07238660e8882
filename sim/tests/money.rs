//! Properties of the pure money functions of `esim_engine::money` (beyond the ones in
//! the engine's own tests): conversion, display and amount checks.

use esim_engine::money::{check_fund_amount, displayed, to_cents, upstream_credit, MAX_FUND_CENTS};
use quickcheck::{quickcheck, TestResult};
use rust_decimal::Decimal;

fn cents_of(raw: u32) -> i64 {
    i64::from(raw) % (MAX_FUND_CENTS + 1)
}

/// A non-negative amount with up to 6 decimals.
fn exact_of(mantissa: u64, scale: u8) -> Decimal {
    Decimal::new((mantissa % 100_000_000_000) as i64, u32::from(scale % 7))
}

quickcheck! {
    /// More money never buys less credit.
    fn credit_is_monotonic(a: u32, b: u32) -> bool {
        let (a, b) = (cents_of(a), cents_of(b));
        (a <= b) == (upstream_credit(a) <= upstream_credit(b)) || upstream_credit(a) == upstream_credit(b)
    }

    /// Funding in two calls never buys more than funding the sum at once.
    fn credit_is_superadditive(a: u32, b: u32) -> bool {
        let (a, b) = (cents_of(a) / 2, cents_of(b) / 2);
        upstream_credit(a) + upstream_credit(b) <= upstream_credit(a + b)
    }

    /// Credit is whole retail cents (0.009), below the amount by less than one of them.
    fn credit_is_whole_retail_cents(raw: u32) -> bool {
        let cents = cents_of(raw);
        let credit = upstream_credit(cents);
        let amount = Decimal::new(cents, 2);
        (credit / Decimal::new(9, 3)).fract().is_zero() && credit <= amount && amount - credit < Decimal::new(9, 3)
    }

    /// Exactly the multiples of 9 cents convert without dust (so 9, 18 and 27 USD do).
    fn no_dust_exactly_on_multiples_of_nine_cents(raw: u32) -> bool {
        let cents = cents_of(raw);
        (upstream_credit(cents) == Decimal::new(cents, 2)) == (cents % 9 == 0)
    }

    /// A fund reads back at most one cent below what was paid.
    fn a_fund_reads_back_within_a_cent(raw: u32) -> bool {
        let cents = cents_of(raw);
        let shown = displayed(upstream_credit(cents));
        Decimal::new(cents, 2) - shown <= Decimal::new(1, 2)
    }

    /// Display is idempotent, monotonic, and never above the exact value.
    fn display_is_a_floor(m1: u64, s1: u8, m2: u64, s2: u8) -> bool {
        let (a, b) = (exact_of(m1, s1), exact_of(m2, s2));
        let (da, db) = (displayed(a), displayed(b));
        displayed(da) == da && da <= a && (a > b || da <= db) && (a < b || da >= db)
    }

    /// Two wallets shown separately never show more than their sum shown at once.
    fn display_is_superadditive(m1: u64, s1: u8, m2: u64, s2: u8) -> bool {
        let (a, b) = (exact_of(m1, s1), exact_of(m2, s2));
        displayed(a) + displayed(b) <= displayed(a + b)
    }

    /// Every whole number of cents parses back to itself; a third decimal does not.
    fn cents_round_trip(raw: u32, extra: u8) -> TestResult {
        let cents = i64::from(raw);
        let digit = i64::from(extra % 10);
        if digit == 0 {
            return TestResult::discard();
        }
        TestResult::from_bool(
            to_cents(Decimal::new(cents, 2)) == Some(cents)
                && to_cents(Decimal::new(cents * 1_000, 5)) == Some(cents)
                && to_cents(Decimal::new(cents * 10 + digit, 3)).is_none(),
        )
    }

    /// The fund bounds are exactly 0.01 to 10000 USD.
    fn fund_bounds_are_exact(raw: i32) -> bool {
        let cents = i64::from(raw) % 2_000_000;
        check_fund_amount(Decimal::new(cents, 2)).is_ok() == (1..=MAX_FUND_CENTS).contains(&cents)
    }
}
