//! Pure money functions: the upstream conversion, display rounding and amount checks.
//!
//! Model (docs/architecture.md, rule 1): the upstream network keeps credit in *retail cents*. The
//! retail price is the reseller price / 0.9, so one retail cent is worth 0.009 USD of
//! reseller money. Funding `a` USD buys `floor(a / 0.009)` retail cents, an exact credit
//! `c = cents * 0.009` with `a - 0.009 < c <= a`. The remainder `a - c` is dust.
//! Everything is integer arithmetic on cents, so it is exact and fast.

use rust_decimal::Decimal;

/// The reseller value of one upstream retail cent, in thousandths of a USD.
pub const RETAIL_CENT_MILLI_USD: i64 = 9;

/// Smallest and largest amount of one eSIM or group fund call.
pub const MIN_FUND_CENTS: i64 = 1;
/// Largest amount of one fund call: $10,000.
pub const MAX_FUND_CENTS: i64 = 1_000_000;

/// The reseller and eSIM low-balance threshold of the `balance.low` and `esim.balance_low` events.
pub fn low_balance_threshold_usd() -> Decimal {
    Decimal::new(5, 0)
}

/// The provisioning fee, 1.75 USD.
pub fn provisioning_fee_usd() -> Decimal {
    Decimal::new(175, 2)
}

/// The smallest manual top-up, 10 USD.
pub fn min_topup_usd() -> Decimal {
    Decimal::new(10, 0)
}

/// An amount as whole cents, when it has at most two decimals (USD amounts never have more).
pub fn to_cents(amount: Decimal) -> Option<i64> {
    // On the mantissa: `amount` is mantissa / 10^scale, so its cents are mantissa
    // times (or, when whole, divided by) a power of ten. (A 96-bit mantissa times 100
    // fits an i128.)
    let (mantissa, scale) = (amount.mantissa(), amount.scale());
    let cents = if scale <= 2 {
        mantissa * 10i128.pow(2 - scale)
    } else {
        let unit = 10i128.pow(scale - 2);
        if mantissa % unit != 0 {
            return None;
        }
        mantissa / unit
    };
    i64::try_from(cents).ok()
}

/// The exact upstream credit bought by funding `amount_cents` (see the module docs).
pub fn upstream_credit(amount_cents: i64) -> Decimal {
    debug_assert!(amount_cents >= 0);
    // floor(a / 0.009) with a = cents / 100  ==  floor(cents * 10 / 9)
    let retail_cents = amount_cents * 10 / RETAIL_CENT_MILLI_USD;
    Decimal::new(retail_cents * RETAIL_CENT_MILLI_USD, 3)
}

/// What a balance shows: rounded down to the cent, never above the exact credit.
pub fn displayed(exact: Decimal) -> Decimal {
    debug_assert!(exact >= Decimal::ZERO);
    let scale = exact.scale();
    let mantissa = exact.mantissa();
    // Every balance read shows one (a fund shows three): in 64-bit integers when the
    // mantissa fits, the digits below the cent dropped by a division (toward zero, as
    // `RoundingStrategy::ToZero`) and trailing zeros stripped as `normalize` does.
    if let Ok(mantissa) = u64::try_from(mantissa) {
        let (mut digits, mut digits_scale) = match scale {
            0..=2 => (mantissa, scale),
            _ => match 10u64.checked_pow(scale - 2) {
                Some(divisor) => (mantissa / divisor, 2),
                // Below 10^-20 USD: nothing above the cent.
                None => (0, 0),
            },
        };
        if digits == 0 {
            return Decimal::ZERO;
        }
        while digits_scale > 0 && digits % 10 == 0 {
            digits /= 10;
            digits_scale -= 1;
        }
        if let Ok(digits) = i64::try_from(digits) {
            return Decimal::new(digits, digits_scale);
        }
    }
    if scale <= 2 {
        // Nothing below the cent to drop.
        return exact.normalize();
    }
    Decimal::from_i128_with_scale(mantissa / 10i128.pow(scale - 2), 2).normalize()
}

/// Checks a fund amount: 0.01 to 10000 USD, at most two decimals.
pub fn check_fund_amount(amount: Decimal) -> Result<i64, String> {
    let cents = to_cents(amount).ok_or_else(|| "amount must have at most 2 decimal places".to_string())?;
    if !(MIN_FUND_CENTS..=MAX_FUND_CENTS).contains(&cents) {
        return Err("amount must be between 0.01 and 10000".to_string());
    }
    Ok(cents)
}

#[cfg(test)]
mod tests {
    use super::*;
    use quickcheck::quickcheck;
    use std::str::FromStr;

    fn d(text: &str) -> Decimal {
        Decimal::from_str(text).unwrap()
    }

    #[test]
    fn dust_examples_of_the_spec() {
        assert_eq!(displayed(upstream_credit(2_000)), d("19.99"));
        assert_eq!(upstream_credit(2_000), d("19.998"));
        for whole in [9, 18, 27] {
            assert_eq!(displayed(upstream_credit(whole * 100)), Decimal::from(whole));
            assert_eq!(upstream_credit(whole * 100), Decimal::from(whole));
        }
    }

    #[test]
    fn cents_parsing() {
        assert_eq!(to_cents(d("20")), Some(2_000));
        assert_eq!(to_cents(d("0.01")), Some(1));
        assert_eq!(to_cents(d("10.50")), Some(1_050));
        assert_eq!(to_cents(d("0.015")), None);
        assert!(check_fund_amount(d("0.00")).is_err());
        assert!(check_fund_amount(d("10000.01")).is_err());
        assert_eq!(check_fund_amount(d("10000")), Ok(1_000_000));
    }

    /// The definitions the integer forms above must agree with.
    fn to_cents_reference(amount: Decimal) -> Option<i64> {
        let scaled = amount.checked_mul(Decimal::ONE_HUNDRED)?;
        if scaled.fract() != Decimal::ZERO {
            return None;
        }
        i64::try_from(scaled.trunc().mantissa() / 10i128.pow(scaled.trunc().scale())).ok()
    }

    fn displayed_reference(exact: Decimal) -> Decimal {
        exact.round_dp_with_strategy(2, rust_decimal::RoundingStrategy::ToZero).normalize()
    }

    fn same_decimal(a: Decimal, b: Decimal) -> bool {
        a == b && a.scale() == b.scale() && a.to_string() == b.to_string()
    }

    #[test]
    fn integer_forms_match_their_definitions_at_the_edges() {
        for text in [
            "0",
            "0.00",
            "0.001",
            "0.009",
            "0.01",
            "0.010",
            "1.999",
            "19.998",
            "10000",
            "10000.01",
            "-0.01",
            "-1.005",
            "0.1234567890123456789012345678",
            "79228162514264337593543950335",
            "7922816251426433759354395033.5",
            "92233720368547758.07",
            "92233720368547758.08",
            "-92233720368547758.08",
            "-92233720368547758.09",
            "0.18446744073709551615",
            "0.18446744073709551616",
            "1844674407370955161.5",
            "0.0000000000000000018446744073",
            "0.0000000000000000000000000001",
            "9223372036854775807",
            "9223372036854775808",
            "18446744073709551615",
            "18446744073709551616",
            "92233720368547758.0700",
            "100.000",
            "0.100",
            "0.0",
        ] {
            let amount = d(text);
            assert_eq!(to_cents(amount), to_cents_reference(amount), "{text}");
            if amount >= Decimal::ZERO {
                assert!(same_decimal(displayed(amount), displayed_reference(amount)), "{text}");
            }
        }
    }

    quickcheck! {
        fn to_cents_matches_its_definition(mantissa: i64, high: u32, scale: u8) -> bool {
            let value = (i128::from(high) << 64 | i128::from(mantissa as u64)) * i128::from(mantissa.signum().max(0) * 2 - 1);
            let amount = Decimal::from_i128_with_scale(value % (1i128 << 95), u32::from(scale % 29));
            to_cents(amount) == to_cents_reference(amount)
        }

        fn displayed_matches_its_definition(mantissa: u64, high: u32, scale: u8) -> bool {
            let value = i128::from(high) << 64 | i128::from(mantissa);
            let exact = Decimal::from_i128_with_scale(value % (1i128 << 95), u32::from(scale % 29));
            same_decimal(displayed(exact), displayed_reference(exact))
        }

        /// Rule 1: a - 0.01 < c <= a for every amount.
        fn conversion_keeps_dust_below_a_cent(cents: u32) -> bool {
            let cents = i64::from(cents % 1_000_001);
            let amount = Decimal::new(cents, 2);
            let credit = upstream_credit(cents);
            credit <= amount && amount - credit < Decimal::new(1, 2)
        }

        /// Rule 2: 0 <= exact - displayed < 0.05 (here even < 0.01), never above.
        fn display_rounds_down_within_a_cent(mantissa: u64, scale: u8) -> bool {
            let exact = Decimal::new((mantissa % 10_000_000_000) as i64, u32::from(scale % 8));
            let shown = displayed(exact);
            shown <= exact && exact - shown < Decimal::new(1, 2) && shown.scale() <= 2
        }

        /// Dust is exactly what the conversion keeps back.
        fn dust_is_amount_minus_credit(cents: u32) -> bool {
            let cents = i64::from(cents % 1_000_001);
            let dust = Decimal::new(cents, 2) - upstream_credit(cents);
            dust >= Decimal::ZERO && dust + upstream_credit(cents) == Decimal::new(cents, 2)
        }
    }
}
