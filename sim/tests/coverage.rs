//! Coverage: a run counts what it reached, and `--require-coverage` fails a run that
//! stopped reaching something (here: the generator made to skip a verb).

use esim_sim::SimOptions;

#[test]
fn require_coverage_fails_when_the_generator_skips_a_verb() {
    let options = SimOptions { seeds: 0..120, steps: 200, jobs: 2, require_coverage: true, ..SimOptions::default() };
    let full = esim_sim::run(&options);
    assert!(full.violations.is_empty(), "{}", full.table());
    for (family, name) in [("event", "group.funded"), ("group", "new"), ("code", "GROUP_NOT_FOUND")] {
        assert!(full.coverage.count(family, name).unwrap() > 0, "{family} {name} not reached:\n{}", full.table());
    }
    // The same seeds without `group` (group creation): nothing about groups is reached.
    let skipped = esim_sim::run(&SimOptions { skip_verb: Some("group"), ..options.clone() });
    assert!(skipped.violations.is_empty(), "{}", skipped.table());
    assert_eq!(skipped.commands.get("group"), None, "the verb was skipped");
    let missing: Vec<String> = skipped.coverage.missing().iter().map(|i| format!("{} {}", i.family, i.name)).collect();
    for item in ["event group.funded", "group new", "group defund requested"] {
        assert!(missing.contains(&item.to_string()), "{item} is reached without groups: {missing:?}");
    }
    assert!(!skipped.ok(), "require_coverage fails the run");
    assert!(skipped.table().contains("NOT REACHED"), "{}", skipped.table());
    // Without require_coverage the same run passes: coverage alone fails nothing.
    let lenient = SimOptions { skip_verb: Some("group"), require_coverage: false, coverage: true, ..options };
    assert!(esim_sim::run(&lenient).ok());
}
