//! The finance report as one self-contained HTML file: no network, no script, printable,
//! with two hand-drawn inline SVG charts (decision 109): a waterfall from money in to
//! where it is now and what was spent, and the balances held at the end of each day.
//!
//! Every figure in a table carries stable markers (`data-account` or `data-date`,
//! `data-field` and `data-value` with the exact amount) so a test can compare the HTML
//! with the JSON report figure by figure; the text shows USD with two decimals.

use crate::finance::{AccountReport, FinanceReport, Holdings};
use crate::finance_render::{account_name, day_columns, day_figure, equation, period_text, usd, GLOSSARY, SECTIONS};
use rust_decimal::prelude::ToPrimitive;
use rust_decimal::Decimal;
use std::fmt::Write;

const STYLE: &str = "body{font-family:system-ui,-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;margin:24px;color:#1d2430;max-width:1150px}
h1{margin:0 0 4px;font-size:26px}h2{font-size:18px;margin:28px 0 4px;border-bottom:1px solid #d5dae1;padding-bottom:3px}
p{margin:4px 0}.meta{color:#4a5566;font-size:13px}.says{color:#4a5566;font-size:13px;margin-bottom:6px}
.verdict{display:inline-block;margin:10px 0;padding:6px 12px;border-radius:4px;font-weight:600}
.ok{background:#e3f4e8;color:#14532d}.bad{background:#fde2e1;color:#8a1c1c}
table{border-collapse:collapse;font-size:13px;margin:4px 0 8px}th,td{padding:4px 9px;border-bottom:1px solid #e4e8ee;white-space:nowrap}
th{text-align:right;font-weight:600;color:#39424f;background:#f4f6f9;white-space:normal;vertical-align:bottom}th.eq{text-align:left}th:first-child,td:first-child{text-align:left}
td.n{text-align:right;font-variant-numeric:tabular-nums}tr.total td{font-weight:700;border-top:2px solid #39424f}
td.eq{text-align:left;font-variant-numeric:tabular-nums;color:#39424f}
svg{display:block;margin:6px 0 4px}svg text{font-family:inherit;font-size:11px;fill:#39424f}
.in{fill:#2f855a}.out{fill:#c05621}.held{fill:#2b6cb0}.c0{fill:#2b6cb0}.c1{fill:#63b3ed}.c2{fill:#805ad5}.c3{fill:#d69e2e}
.grid{stroke:#d5dae1;stroke-width:1}.link{stroke:#8a94a3;stroke-dasharray:3 2}
dl.words{display:grid;grid-template-columns:minmax(150px,max-content) minmax(0,70ch);gap:6px 16px;font-size:13px;margin:8px 0}dl.words dt{font-weight:600}dl.words dd{margin:0;color:#39424f}
th[title]{text-decoration:underline dotted;cursor:help}
@media screen{table{display:block;max-width:100%;overflow-x:auto}}
@media print{body{margin:10mm;max-width:none}h2{break-after:avoid}table,svg{break-inside:avoid}}";

/// Escapes text for HTML content and attribute values.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// A vertical scale from money to pixels, in exact arithmetic (no floats in the engine).
struct Scale {
    low: Decimal,
    high: Decimal,
    top_px: i64,
    height_px: i64,
}

impl Scale {
    fn new(values: impl IntoIterator<Item = Decimal>, top_px: i64, height_px: i64) -> Scale {
        let (mut low, mut high) = (Decimal::ZERO, Decimal::ZERO);
        for value in values {
            low = low.min(value);
            high = high.max(value);
        }
        if high == low {
            high = low + Decimal::ONE;
        }
        Scale { low, high, top_px, height_px }
    }

    fn y(&self, value: Decimal) -> i64 {
        let share = (self.high - value) / (self.high - self.low) * Decimal::from(self.height_px);
        self.top_px + share.round().to_i64().unwrap_or(0)
    }

    /// A bar between two amounts: (y of its top, its height), at least one pixel.
    fn bar(&self, a: Decimal, b: Decimal) -> (i64, i64) {
        let (ya, yb) = (self.y(a), self.y(b));
        (ya.min(yb), (ya - yb).abs().max(1))
    }
}

/// The waterfall: opening, money in going up, what was spent going down, and what is
/// held at the end, stacked by where it is.
fn waterfall(row: &AccountReport, with_opening: bool) -> String {
    let (width_px, height_px, top_px, plot_px) = (1100, 330, 24, 240);
    let steps = waterfall_steps(row, with_opening);
    let mut levels = vec![Decimal::ZERO];
    let mut level = Decimal::ZERO;
    for (_, change, _) in &steps {
        level += change;
        levels.push(level);
    }
    levels.push(row.closing.total_usd);
    let scale = Scale::new(levels.iter().copied(), top_px, plot_px);
    let slot_px = (width_px - 80) / (steps.len() as i64 + 1);
    let bar_px = slot_px * 3 / 5;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="100%" style="max-width:{width_px}px" viewBox="0 0 {width_px} {height_px}" role="img" aria-label="Waterfall from money in to where the money is now">"#
    );
    let zero = scale.y(Decimal::ZERO);
    let _ = write!(svg, r#"<line class="grid" x1="60" y1="{zero}" x2="{}" y2="{zero}"/>"#, width_px - 10);
    let _ = write!(svg, r#"<text x="54" y="{}" text-anchor="end">0</text>"#, zero + 4);
    let mut level = Decimal::ZERO;
    for (i, (label, change, class)) in steps.iter().enumerate() {
        let x = 70 + i as i64 * slot_px;
        let (y, h) = scale.bar(level, level + change);
        let _ = write!(svg, r#"<rect class="{class}" x="{x}" y="{y}" width="{bar_px}" height="{h}"/>"#);
        let sign = if *class == "out" && !change.is_zero() { "−" } else { "" };
        centred_text(&mut svg, x + bar_px / 2, y - 5, &format!("{sign}{}", usd(change.abs())));
        centred_text(&mut svg, x + bar_px / 2, top_px + plot_px + 20, label);
        level += change;
        let next = scale.y(level);
        let _ = write!(svg, r#"<line class="link" x1="{}" y1="{next}" x2="{}" y2="{next}"/>"#, x + bar_px, x + slot_px);
    }
    // The end: what is held, stacked by where it is (it equals the last level when conserved).
    let x = 70 + steps.len() as i64 * slot_px;
    let mut base = Decimal::ZERO;
    for (i, (value, label)) in holdings_parts(&row.closing).into_iter().enumerate() {
        let (y, h) = scale.bar(base, base + value);
        if !value.is_zero() {
            let _ = write!(
                svg,
                r#"<rect class="c{i}" x="{x}" y="{y}" width="{bar_px}" height="{h}"><title>{label}: {}</title></rect>"#,
                usd(value)
            );
        }
        base += value;
    }
    let top = scale.y(row.closing.total_usd);
    centred_text(&mut svg, x + bar_px / 2, top - 5, &usd(row.closing.total_usd));
    centred_text(&mut svg, x + bar_px / 2, top_px + plot_px + 20, "held now");
    legend(&mut svg, 70, height_px - 22, true);
    svg.push_str("</svg>");
    svg
}

/// The waterfall's steps: (label, change, class), the opening first when there is one.
fn waterfall_steps(row: &AccountReport, with_opening: bool) -> Vec<(&'static str, Decimal, &'static str)> {
    let mut steps = Vec::with_capacity(8);
    if with_opening {
        steps.push(("opening", row.opening.total_usd, "held"));
    }
    steps.push(("top-ups", row.money_in.top_ups_usd, "in"));
    steps.push(("auto-refills", row.money_in.auto_refills_usd, "in"));
    let spent = &row.spent;
    steps.push(("fees", -spent.provisioning_fees_usd, "out"));
    steps.push(("data reported", -spent.data_charged_reported_usd, "out"));
    steps.push(("data unreported", -spent.data_charged_unreported_usd, "out"));
    steps.push(("forfeited", -spent.forfeited_usd, "out"));
    steps.push(("dust", -spent.dust_usd, "out"));
    steps
}

/// A chart label centred on `x`.
fn centred_text(svg: &mut String, x: i64, y: i64, text: &str) {
    let _ = write!(svg, r#"<text x="{x}" y="{y}" text-anchor="middle">{text}</text>"#);
}

/// The four places money is held, with their chart labels.
fn holdings_parts(h: &Holdings) -> [(Decimal, &'static str); 4] {
    [
        (h.reseller_balance_usd, Holdings::LABELS[0]),
        (h.esim_wallets_usd, Holdings::LABELS[1]),
        (h.group_balances_usd, Holdings::LABELS[2]),
        (h.returns_pending_usd, Holdings::LABELS[3]),
    ]
}

/// The colours of the holdings, and of money in and spent when `with_flows`.
fn legend(svg: &mut String, x: i64, y: i64, with_flows: bool) {
    let flows = [("in", "money in"), ("out", "spent")];
    let parts =
        [("c0", "reseller balances"), ("c1", "eSIM wallets"), ("c2", "group balances"), ("c3", "returns on their way")];
    let items = flows.iter().filter(|_| with_flows).chain(&parts);
    let mut x = x;
    for (class, label) in items {
        let _ = write!(
            svg,
            r#"<rect class="{class}" x="{x}" y="{y}" width="12" height="12"/><text x="{}" y="{}">{label}</text>"#,
            x + 16,
            y + 10
        );
        x += 30 + 7 * label.len() as i64;
    }
}

/// Balances held at the end of each day with a movement, stacked by where they are.
fn balances_chart(report: &FinanceReport) -> String {
    let (width_px, height_px, top_px, plot_px) = (1100, 300, 20, 220);
    let days = &report.days;
    let scale = Scale::new(days.iter().map(|d| d.closing.total_usd), top_px, plot_px);
    let slot_px = ((width_px - 90) / days.len().max(1) as i64).max(1);
    let bar_px = (slot_px * 3 / 4).max(1);
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="100%" style="max-width:{width_px}px" viewBox="0 0 {width_px} {height_px}" role="img" aria-label="Balances held at the end of each day">"#
    );
    for value in [Decimal::ZERO, scale.high] {
        let y = scale.y(value);
        let _ = write!(
            svg,
            r#"<line class="grid" x1="76" y1="{y}" x2="{}" y2="{y}"/><text x="70" y="{}" text-anchor="end">{}</text>"#,
            width_px - 10,
            y + 4,
            usd(value)
        );
    }
    // At most about twelve date labels, whatever the number of days.
    let label_every = days.len().div_ceil(12).max(1);
    for (i, day) in days.iter().enumerate() {
        let x = 82 + i as i64 * slot_px;
        let mut base = Decimal::ZERO;
        for (part, (value, label)) in holdings_parts(&day.closing).into_iter().enumerate() {
            if value > Decimal::ZERO {
                let (y, h) = scale.bar(base, base + value);
                let _ = write!(
                    svg,
                    r#"<rect class="c{part}" x="{x}" y="{y}" width="{bar_px}" height="{h}"><title>{} {label}: {}</title></rect>"#,
                    day.date,
                    usd(value)
                );
                base += value;
            }
        }
        if i % label_every == 0 {
            let _ = write!(
                svg,
                r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
                x + bar_px / 2,
                top_px + plot_px + 18,
                day.date
            );
        }
    }
    legend(&mut svg, 82, height_px - 22, false);
    svg.push_str("</svg>");
    svg
}

impl FinanceReport {
    /// One self-contained, printable HTML file (see the module docs).
    pub fn to_html(&self) -> String {
        let mut out = String::with_capacity(16 * 1024);
        let _ = write!(
            out,
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Finance report</title><style>{STYLE}</style></head><body>\n"
        );
        let _ = writeln!(out, "<h1>Finance report</h1>");
        let _ = writeln!(out, "<p class=\"meta\">Period: {}.</p>", escape(&period_text(self)));
        let _ = writeln!(
            out,
            "<p class=\"meta\">Rows: {}. As of {}. USD, two decimals; exact figures in the JSON and CSV reports. The words are explained at the end (What the words mean).</p>",
            escape(&self.scope),
            escape(&self.generated_at)
        );
        let (class, verdict) = if self.conserved {
            ("ok", "Conserved: every difference is exactly 0.")
        } else {
            ("bad", "NOT conserved: see the differences below.")
        };
        let _ = writeln!(
            out,
            "<p class=\"verdict {class}\" data-field=\"conserved\" data-value=\"{}\">{verdict}</p>",
            self.conserved
        );
        let _ =
            writeln!(out, "<h2>Where the money is now</h2>\n<p class=\"says\">{}</p>", escape(&equation(&self.total)));
        out.push_str(&waterfall(&self.total, self.period.from.is_some()));
        let rows: Vec<&AccountReport> = self.accounts.iter().chain([&self.total]).collect();
        self.section_tables(&mut out, &rows);
        difference_table(&mut out, &rows);
        self.days_html(&mut out);
        out.push_str("<h2>What the words mean</h2>\n<dl class=\"words\">\n");
        for (term, meaning) in GLOSSARY {
            let _ = writeln!(out, "<dt>{}</dt><dd>{}</dd>", escape(term), escape(meaning));
        }
        out.push_str("</dl>\n</body></html>\n");
        out
    }

    /// One table per section of the report ([`SECTIONS`]): a row per account, then the total.
    fn section_tables(&self, out: &mut String, rows: &[&AccountReport]) {
        for (key, title, says, labels, values) in SECTIONS {
            if key == "opening" && self.period.from.is_none() {
                let _ = writeln!(
                    out,
                    "<h2>{title}</h2>\n<p class=\"says\">0.00: the period starts at the first movement.</p>"
                );
                continue;
            }
            let fields: Vec<String> = self
                .total
                .figures()
                .into_iter()
                .map(|(n, _)| n)
                .filter(|n| n.starts_with(&format!("{key}.")))
                .collect();
            let _ = writeln!(out, "<h2>{title}</h2>\n<p class=\"says\">{says}</p>\n<table><thead><tr><th>account</th>");
            for label in labels {
                heading(out, label);
            }
            out.push_str("</tr></thead><tbody>\n");
            for row in rows {
                let total = row.account_id == "TOTAL";
                let name = if total { "Total".to_string() } else { account_name(row) };
                let _ = write!(out, "<tr{}><td>{}</td>", if total { " class=\"total\"" } else { "" }, escape(&name));
                for (field, value) in fields.iter().zip(values(row)) {
                    figure(out, "account", &row.account_id, field, value);
                }
                out.push_str("</tr>\n");
            }
            out.push_str("</tbody></table>\n");
        }
    }

    /// The balances chart and the movements of each day.
    fn days_html(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "<h2>Balances per day</h2>\n<p class=\"says\">Held at the end of each day with a movement.</p>"
        );
        if self.days.is_empty() {
            out.push_str("<p>No movement in the period.</p>\n");
        } else {
            out.push_str(&balances_chart(self));
            let _ = writeln!(out, "<h2>Movements per day</h2>\n<p class=\"says\">The accounts in the report summed; “held” is at the end of the day.</p>");
            let columns = day_columns();
            out.push_str("<table><thead><tr><th>date</th>");
            for (_, label) in &columns {
                heading(out, label);
            }
            out.push_str("</tr></thead><tbody>\n");
            for day in &self.days {
                let _ = write!(out, "<tr><td>{}</td>", escape(&day.date));
                for (name, _) in &columns {
                    figure(out, "date", &day.date, name, day_figure(day, name));
                }
                out.push_str("</tr>\n");
            }
            out.push_str("</tbody></table>\n");
        }
    }
}

/// The difference of each account and the total, with the equation it comes from.
fn difference_table(out: &mut String, rows: &[&AccountReport]) {
    let _ = writeln!(out, "<h2>The difference</h2>\n<p class=\"says\">opening + money in − where it is now − where it went = difference, which must be exactly 0.</p>");
    out.push_str(
        "<table><thead><tr><th>account</th><th class=\"eq\">equation</th><th>difference</th></tr></thead><tbody>\n",
    );
    for row in rows {
        let total = row.account_id == "TOTAL";
        let name = if total { "Total".to_string() } else { account_name(row) };
        let _ = write!(
            out,
            "<tr{}><td>{}</td><td class=\"eq\">{}</td>",
            if total { " class=\"total\"" } else { "" },
            escape(&name),
            escape(&equation(row))
        );
        figure(out, "account", &row.account_id, "difference_usd", row.difference_usd);
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody></table>\n");
}

/// A column heading; a word of the glossary carries its meaning as a tooltip.
fn heading(out: &mut String, label: &str) {
    let meaning =
        GLOSSARY.iter().find(|(term, _)| term.split(" (").next().unwrap_or(term).split(", ").any(|w| w == label));
    match meaning {
        Some((_, meaning)) => {
            let _ = write!(out, "<th title=\"{}\">{}</th>", escape(meaning), escape(label));
        }
        None => {
            let _ = write!(out, "<th>{}</th>", escape(label));
        }
    }
}

/// One figure's cell: the exact amount in `data-value`, two decimals in the text.
fn figure(out: &mut String, key: &str, id: &str, field: &str, value: Decimal) {
    let _ = write!(
        out,
        "<td class=\"n\" data-{key}=\"{}\" data-field=\"{field}\" data-value=\"{value}\">{}</td>",
        escape(id),
        usd(value)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_what_html_would_read_as_markup() {
        assert_eq!(escape(r#"Tom & Jerry's <"Co">"#), "Tom &amp; Jerry&#39;s &lt;&quot;Co&quot;&gt;");
    }

    #[test]
    fn the_scale_maps_the_range_onto_the_plot() {
        let scale = Scale::new([Decimal::from(50), Decimal::from(200)], 10, 100);
        assert_eq!(scale.y(Decimal::from(200)), 10);
        assert_eq!(scale.y(Decimal::ZERO), 110);
        assert_eq!(scale.bar(Decimal::ZERO, Decimal::from(100)), (60, 50));
        assert_eq!(scale.bar(Decimal::ONE, Decimal::ONE).1, 1, "a zero bar is still drawn one pixel high");
    }
}
