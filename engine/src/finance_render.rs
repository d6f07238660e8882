//! The finance report as JSON and CSV (exact: every decimal, nothing rounded) and as
//! Markdown (for people: USD with two decimals and thousands separators). HTML is in
//! `finance_html`.

use crate::finance::{AccountReport, DayRow, FinanceReport, Holdings, MoneyIn, MovedInside, Spent};
use rust_decimal::{Decimal, RoundingStrategy};
use std::fmt::Write;

/// The formats [`FinanceReport::render`] knows.
pub const FORMATS: [&str; 4] = ["json", "csv", "md", "html"];

/// USD as people read it: two decimals, half away from zero, thousands separators
/// (`1,234.50`, `-0.01`, `0.00`). Exact values are in JSON and CSV (decision 108).
pub fn usd(value: Decimal) -> String {
    let rounded = value.round_dp_with_strategy(2, RoundingStrategy::MidpointAwayFromZero);
    let text = format!("{:.2}", rounded.abs());
    let (whole, cents) = text.split_once('.').unwrap_or((&text, "00"));
    let mut grouped = String::with_capacity(whole.len() + whole.len() / 3);
    for (i, digit) in whole.chars().enumerate() {
        if i > 0 && (whole.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(digit);
    }
    let sign = if rounded.is_sign_negative() && !rounded.is_zero() { "-" } else { "" };
    format!("{sign}{grouped}.{cents}")
}

/// `1 account`, `3 accounts`: a count with its noun in the right number.
pub fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

pub use crate::finance::every_account_scope;

/// The words of the report a finance reader may not know, with what each means: shown
/// at the end of the Markdown and HTML reports (and, in the same words, on the
/// dashboard). Each says what the figure counts and why it differs from a figure beside it.
pub const GLOSSARY: [(&str, &str); 7] = [
    (
        "conversion dust",
        "The upstream network keeps eSIM credit in retail cents worth $0.009, and a return \
         comes back in whole US cents. The part of a fund below one retail cent, and the \
         sub-cent rest of a return, cannot be credited: it is kept here to the last digit. \
         It is never lost and never spendable.",
    ),
    (
        "eSIM funds, group funds",
        "What reached the wallets. A fund of 35.00 credits 34.991 (shown 34.99): the \
         0.009 left is conversion dust, the same day.",
    ),
    (
        "returns requested, returns settled",
        "A defund (or a move into a group) sends a wallet's exact credit back: that is \
         requested (17.838, shown 17.84). About 15 minutes later the whole cents of it \
         reach the reseller balance: that is settled (17.83). The rest, under a cent, \
         is conversion dust.",
    ),
    (
        "returns on their way",
        "Requested returns not settled yet: still the reseller's money, between the \
         wallet and the reseller balance.",
    ),
    (
        "data not yet reported",
        "Data charged to a wallet at once when used, but not yet reported by the upstream \
         network. Reports wait for the 15-minute pause after a fund and then the next sync \
         cycle, so an eSIM's total_data_charged_usd stays 0 meanwhile. Over a period it \
         can be below 0: reports caught up with usage of earlier days.",
    ),
    ("forfeited", "Wallet credit of terminated eSIMs: it cannot be returned."),
    (
        "spent (and the wallet's lifetime usage)",
        "Spent counts what left the resellers' hands for good: provisioning fees, data \
         charged, forfeits, conversion dust. The reseller's lifetime usage \
         (GET /wallet/balance) counts every fee and every fund, including credit still in \
         wallets and credit returned later, so it is at least the fees plus what was \
         funded, and usually above spent.",
    ),
];

/// An account as people name it: `Company (acct_id)`, or the id alone.
pub fn account_name(row: &AccountReport) -> String {
    match &row.company_name {
        Some(name) if !name.is_empty() => format!("{name} ({})", row.account_id),
        _ => row.account_id.clone(),
    }
}

/// The period in words.
pub fn period_text(report: &FinanceReport) -> String {
    let from = report.period.from.as_deref().map_or("the first movement".to_string(), |d| format!("the start of {d}"));
    let until = report.period.until.as_deref().map_or("now".to_string(), |d| format!("the start of {d} (not counted)"));
    format!("from {from} until {until}, days in UTC")
}

/// The equation of a row, written out with its figures.
pub fn equation(row: &AccountReport) -> String {
    format!(
        "opening {} + money in {} − where it is now {} − where it went {} = {}",
        usd(row.opening.total_usd),
        usd(row.money_in.total_usd),
        usd(row.closing.total_usd),
        usd(row.spent.total_usd),
        usd(row.difference_usd)
    )
}

/// The sections of the account tables, in order: (key, title, what it says, labels, values).
pub type Section =
    (&'static str, &'static str, &'static str, &'static [&'static str], fn(&AccountReport) -> Vec<Decimal>);

/// The account tables: opening, money in, where it is now, where it went.
pub const SECTIONS: [Section; 4] = [
    ("opening", "Opening balance", "Held at the start of the period.", Holdings::LABELS, |r| r.opening.values()),
    ("money_in", "Money in", "Came in from outside during the period.", MoneyIn::LABELS, |r| r.money_in.values()),
    (
        "closing",
        "Where it is now",
        "Held at the end of the period: resellers can still spend it or get it back.",
        Holdings::LABELS,
        |r| r.closing.values(),
    ),
    ("spent", "Where it went", "Left the resellers' hands for good during the period.", Spent::LABELS, |r| {
        r.spent.values()
    }),
];

/// The per-day table's columns: (`section.field`, label).
pub fn day_columns() -> Vec<(String, &'static str)> {
    let mut out = Vec::new();
    let mut add = |section: &str, fields: &[&str], labels: &[&'static str]| {
        for (field, label) in fields.iter().zip(labels) {
            if *field != "total_usd" || section == "closing" {
                out.push((format!("{section}.{field}"), *label));
            }
        }
    };
    add("money_in", MoneyIn::FIELDS, MoneyIn::LABELS);
    add("moved_inside", MovedInside::FIELDS, MovedInside::LABELS);
    add("spent", Spent::FIELDS, Spent::LABELS);
    add("closing", &Holdings::FIELDS[4..], &Holdings::LABELS[4..]);
    out
}

/// A day's figure by its `section.field` name.
pub fn day_figure(day: &DayRow, name: &str) -> Decimal {
    day.figures().into_iter().find(|(n, _)| n == name).map_or(Decimal::ZERO, |(_, v)| v)
}

impl FinanceReport {
    /// Pretty JSON; amounts are JSON numbers with every decimal they have and no trailing
    /// zeros (`120.22`, `0`, `0.008`).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("reports serialize")
    }

    /// One row per account and the total row, every figure exact, through the `csv`
    /// crate (quoting company names). Columns: `account_id`, `company_name`, then every
    /// figure as `section.field` (see [`AccountReport::figures`]).
    pub fn to_csv(&self) -> String {
        let mut writer = csv::Writer::from_writer(Vec::new());
        let header: Vec<String> = ["account_id".to_string(), "company_name".to_string()]
            .into_iter()
            .chain(self.total.figures().into_iter().map(|(name, _)| name))
            .collect();
        let mut rows = vec![header];
        for row in self.accounts.iter().chain([&self.total]) {
            rows.push(
                [row.account_id.clone(), row.company_name.clone().unwrap_or_default()]
                    .into_iter()
                    .chain(row.figures().into_iter().map(|(_, value)| value.to_string()))
                    .collect(),
            );
        }
        for row in rows {
            writer.write_record(&row).expect("writing to memory");
        }
        String::from_utf8(writer.into_inner().expect("writing to memory")).expect("CSV of UTF-8 text")
    }

    /// The per-day table as CSV (exact figures), one row per day with a movement.
    pub fn days_to_csv(&self) -> String {
        let mut writer = csv::Writer::from_writer(Vec::new());
        let columns = day_columns();
        let header = std::iter::once("date".to_string()).chain(columns.iter().map(|(name, _)| name.clone()));
        writer.write_record(header).expect("writing to memory");
        for day in &self.days {
            let cells = std::iter::once(day.date.clone())
                .chain(columns.iter().map(|(name, _)| day_figure(day, name).to_string()));
            writer.write_record(cells).expect("writing to memory");
        }
        String::from_utf8(writer.into_inner().expect("writing to memory")).expect("CSV of UTF-8 text")
    }

    /// Markdown for people: the sections in order, one row per account and a total row,
    /// USD with two decimals, the equation written out, and the per-day table.
    pub fn to_markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "# Finance report\n");
        let _ = writeln!(out, "- Period: {}", period_text(self));
        let _ = writeln!(out, "- Rows: {}", self.scope);
        let _ = writeln!(out, "- As of: {}", self.generated_at);
        let _ = writeln!(out, "- Words: explained at the end (What the words mean)");
        let _ = writeln!(
            out,
            "- Conserved: **{}**\n",
            if self.conserved { "yes, every difference is exactly 0" } else { "NO: see the differences" }
        );
        let rows: Vec<&AccountReport> = self.accounts.iter().chain([&self.total]).collect();
        let table = |out: &mut String, labels: &[&str], cells: &dyn Fn(&AccountReport) -> Vec<String>| {
            let _ = writeln!(out, "| account | {} |", labels.join(" | "));
            // Figures align right; the equation (text) left.
            let align: String = labels.iter().map(|l| if *l == "equation" { "---|" } else { "---:|" }).collect();
            let _ = writeln!(out, "|---|{align}");
            for row in &rows {
                let name = if row.account_id == "TOTAL" { "**Total**".to_string() } else { account_name(row) };
                let _ = writeln!(out, "| {} | {} |", name.replace('|', "\\|"), cells(row).join(" | "));
            }
            let _ = writeln!(out);
        };
        for (key, title, says, labels, values) in SECTIONS {
            if key == "opening" && self.period.from.is_none() {
                let _ = writeln!(out, "## {title}\n\n0.00: the period starts at the first movement.\n");
                continue;
            }
            let _ = writeln!(out, "## {title}\n\n{says}\n");
            table(&mut out, labels, &|row| values(row).into_iter().map(usd).collect());
        }
        let _ = writeln!(out, "## The difference\n\nopening + money in − where it is now − where it went = difference, which must be exactly 0.\n");
        table(&mut out, &["equation", "difference"], &|row| vec![equation(row), usd(row.difference_usd)]);
        let _ = writeln!(out, "## Movements per day\n");
        if self.days.is_empty() {
            let _ = writeln!(out, "No movement in the period.\n");
            glossary_markdown(&mut out);
            return out;
        }
        let columns = day_columns();
        let _ = writeln!(out, "| date | {} |", columns.iter().map(|(_, label)| *label).collect::<Vec<_>>().join(" | "));
        let _ = writeln!(out, "|---|{}", "---:|".repeat(columns.len()));
        for day in &self.days {
            let cells: Vec<String> = columns.iter().map(|(name, _)| usd(day_figure(day, name))).collect();
            let _ = writeln!(out, "| {} | {} |", day.date, cells.join(" | "));
        }
        let _ = writeln!(out);
        glossary_markdown(&mut out);
        out
    }

    /// The report as `json`, `csv`, `md` or `html`; `None` for another format.
    pub fn render(&self, format: &str) -> Option<String> {
        match format {
            "json" => Some(self.to_json()),
            "csv" => Some(self.to_csv()),
            "md" | "markdown" => Some(self.to_markdown()),
            "html" => Some(self.to_html()),
            _ => None,
        }
    }

    /// The media type of a format's rendering.
    pub fn content_type(format: &str) -> &'static str {
        match format {
            "json" => "application/json",
            "csv" => "text/csv; charset=utf-8",
            "html" => "text/html; charset=utf-8",
            _ => "text/markdown; charset=utf-8",
        }
    }
}

/// The glossary as a Markdown section.
fn glossary_markdown(out: &mut String) {
    let _ = writeln!(out, "## What the words mean\n");
    for (term, meaning) in GLOSSARY {
        let _ = writeln!(out, "- **{term}**: {meaning}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_scopes_say_one_or_many_right() {
        assert_eq!(count(1, "account", "accounts"), "1 account");
        assert_eq!(count(0, "account", "accounts"), "0 accounts");
        assert_eq!(count(3, "shard", "shards"), "3 shards");
        assert_eq!(every_account_scope(1), "the 1 account, one row");
        assert_eq!(every_account_scope(3), "all 3 accounts, one row each");
        assert_eq!(every_account_scope(0), "no account yet");
    }

    #[test]
    fn the_glossary_explains_every_word_a_reader_asked_about() {
        let terms: Vec<&str> = GLOSSARY.iter().map(|(term, _)| *term).collect();
        for asked in ["conversion dust", "forfeited", "data not yet reported", "returns on their way"] {
            assert!(terms.contains(&asked), "{asked} is in the glossary");
        }
        // Every term is a label the report shows (beside it, in brackets, what it is set against).
        let labels: Vec<&str> = [
            crate::finance::Holdings::LABELS,
            crate::finance::MoneyIn::LABELS,
            crate::finance::Spent::LABELS,
            crate::finance::MovedInside::LABELS,
        ]
        .concat();
        for term in terms {
            for word in term.split(" (").next().unwrap_or(term).split(", ") {
                assert!(labels.contains(&word), "{word} is a label of the report");
            }
        }
        let report = crate::finance::FinanceReport::combine("now".into(), "test".into(), Vec::new());
        for text in [report.to_markdown(), report.to_html()] {
            assert!(text.contains("What the words mean"), "{text}");
            for (term, _) in GLOSSARY {
                let word = term.split(" (").next().unwrap_or(term);
                assert!(text.contains(&format!("{word} (and")) || text.contains(term), "{term} in the rendering");
            }
        }
    }

    #[test]
    fn usd_rounds_half_away_and_groups_thousands() {
        let d = |t: &str| t.parse::<Decimal>().unwrap();
        assert_eq!(usd(d("1234.5")), "1,234.50");
        assert_eq!(usd(d("1234567.005")), "1,234,567.01");
        assert_eq!(usd(d("999.994")), "999.99");
        assert_eq!(usd(d("-0.004")), "0.00");
        assert_eq!(usd(d("-1000")), "-1,000.00");
        assert_eq!(usd(d("0")), "0.00");
        assert_eq!(usd(d("100")), "100.00");
    }
}
