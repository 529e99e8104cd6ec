//! A thin linear-programming layer over HiGHS whose constraints carry family names.
//!
//! Every formulation in this crate groups its rows into *families* (for example
//! `"demand coverage"` or `"node capacity"`). When HiGHS reports a model infeasible we
//! re-solve an elastic copy in which every row may be violated at a cost; the families
//! whose rows still need violation at the elastic optimum are the ones that made the
//! model infeasible, and they are reported by name.

use std::fmt;

use highs::{HighsModelStatus, RowProblem, Sense};

/// Tolerance under which an elastic slack counts as zero.
const SLACK_TOL: f64 = 1e-7;

/// Whether to minimise or maximise the objective.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Minimise the objective.
    Minimise,
    /// Maximise the objective.
    Maximise,
}

/// Handle of a variable inside one [`LinearProgram`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Var(usize);

impl Var {
    /// Position of the variable in the solution vector.
    pub fn index(self) -> usize {
        self.0
    }
}

#[derive(Debug, Clone)]
struct Column {
    cost: f64,
    lower: f64,
    upper: f64,
}

#[derive(Debug, Clone)]
struct Row {
    family: &'static str,
    lower: f64,
    upper: f64,
    terms: Vec<(usize, f64)>,
}

/// Errors from building or solving a linear program.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LpError {
    /// No point satisfies all constraints; `families` are the constraint families that
    /// had to be violated in the elastic re-solve.
    #[error("infeasible: constraint families {families:?} cannot all be satisfied")]
    Infeasible {
        /// Names of the families whose rows were violated.
        families: Vec<String>,
    },
    /// The objective can be improved without bound.
    #[error("unbounded objective")]
    Unbounded,
    /// A coefficient, bound or cost was NaN, or a lower bound exceeded an upper bound.
    #[error("invalid model: {0}")]
    InvalidModel(String),
    /// HiGHS failed for another reason.
    #[error("solver failure: {0}")]
    Solver(String),
}

/// The primal solution of a solved [`LinearProgram`].
#[derive(Debug, Clone)]
pub struct LpSolution {
    values: Vec<f64>,
    objective: f64,
}

impl LpSolution {
    /// Value of `var` at the optimum.
    pub fn value(&self, var: Var) -> f64 {
        self.values[var.0]
    }

    /// Objective value at the optimum.
    pub fn objective(&self) -> f64 {
        self.objective
    }
}

/// Which HiGHS algorithm solves the LP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Method {
    /// HiGHS decides (dual simplex for most LPs).
    #[default]
    Choose,
    /// Dual simplex.
    DualSimplex,
    /// Primal simplex.
    PrimalSimplex,
    /// Interior point with crossover.
    Ipm,
}

/// HiGHS settings for [`LinearProgram::solve_with`]; the default is what
/// [`LinearProgram::solve`] uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SolverOptions {
    /// Algorithm.
    pub method: Method,
    /// Whether HiGHS presolves the model first.
    pub presolve: bool,
    /// Whether HiGHS may run parallel simplex (PAMI) on its thread pool.
    pub parallel: bool,
    /// Whether interior point ends with crossover to a vertex (HiGHS `run_crossover`).
    /// Off saves time when only the objective (e.g. the max load) is needed; the
    /// solution is then optimal to the IPM tolerance but not a basic one.
    pub crossover: bool,
}

impl Default for SolverOptions {
    fn default() -> Self {
        Self {
            method: Method::Choose,
            presolve: true,
            parallel: false,
            crossover: true,
        }
    }
}

/// A linear program under construction.
#[derive(Debug, Clone)]
pub struct LinearProgram {
    direction: Direction,
    columns: Vec<Column>,
    rows: Vec<Row>,
}

impl LinearProgram {
    /// An empty program with the given optimisation direction.
    pub fn new(direction: Direction) -> Self {
        Self {
            direction,
            columns: Vec::new(),
            rows: Vec::new(),
        }
    }

    /// Adds a variable with objective coefficient `cost` and bounds `[lower, upper]`
    /// (either may be infinite).
    pub fn add_var(&mut self, cost: f64, lower: f64, upper: f64) -> Var {
        self.columns.push(Column { cost, lower, upper });
        Var(self.columns.len() - 1)
    }

    /// Adds `lower <= sum(coef * var) <= upper` to the named constraint family.
    pub fn add_constraint(
        &mut self,
        family: &'static str,
        lower: f64,
        upper: f64,
        terms: impl IntoIterator<Item = (Var, f64)>,
    ) {
        self.rows.push(Row {
            family,
            lower,
            upper,
            terms: terms.into_iter().map(|(v, c)| (v.0, c)).collect(),
        });
    }

    /// Number of variables.
    pub fn num_vars(&self) -> usize {
        self.columns.len()
    }

    /// Number of constraints.
    pub fn num_constraints(&self) -> usize {
        self.rows.len()
    }

    fn validate(&self) -> Result<(), LpError> {
        for (i, c) in self.columns.iter().enumerate() {
            if c.cost.is_nan() || c.lower.is_nan() || c.upper.is_nan() || c.lower > c.upper {
                return Err(LpError::InvalidModel(format!(
                    "variable {i} has cost {} and bounds [{}, {}]",
                    c.cost, c.lower, c.upper
                )));
            }
        }
        for r in &self.rows {
            if r.lower.is_nan() || r.upper.is_nan() || r.lower > r.upper {
                return Err(LpError::Infeasible {
                    families: vec![r.family.to_string()],
                });
            }
            if r.terms
                .iter()
                .any(|&(v, c)| !c.is_finite() || v >= self.columns.len())
            {
                return Err(LpError::InvalidModel(format!(
                    "a row of family '{}' has a non-finite coefficient or unknown variable",
                    r.family
                )));
            }
        }
        Ok(())
    }

    /// Solves the program with HiGHS.
    pub fn solve(&self) -> Result<LpSolution, LpError> {
        self.solve_with(&SolverOptions::default())
    }

    /// Solves the program with HiGHS using `options` (infeasibility diagnosis always
    /// uses the defaults).
    pub fn solve_with(&self, options: &SolverOptions) -> Result<LpSolution, LpError> {
        self.validate()?;
        let sense = match self.direction {
            Direction::Minimise => Sense::Minimise,
            Direction::Maximise => Sense::Maximise,
        };
        let (status, values, objective) = run_highs(&self.columns, &self.rows, sense, options)?;
        match status {
            HighsModelStatus::Optimal | HighsModelStatus::ModelEmpty => {
                let values = if values.len() == self.columns.len() {
                    values
                } else {
                    // An empty model has no solver solution; every variable sits at a
                    // finite bound, which is optimal since there are no rows.
                    self.columns
                        .iter()
                        .map(|c| empty_model_value(c, sense))
                        .collect()
                };
                let objective = if self.rows.is_empty() && self.columns.is_empty() {
                    0.0
                } else {
                    objective
                };
                Ok(LpSolution { values, objective })
            }
            HighsModelStatus::Infeasible => Err(self.diagnose_infeasibility()),
            HighsModelStatus::Unbounded => Err(LpError::Unbounded),
            HighsModelStatus::UnboundedOrInfeasible => match self.diagnose_infeasibility() {
                LpError::Infeasible { families } if families.is_empty() => Err(LpError::Unbounded),
                e => Err(e),
            },
            other => Err(LpError::Solver(format!(
                "HiGHS ended with status {other:?}"
            ))),
        }
    }

    /// Names the families whose relaxation alone restores feasibility: each family in
    /// turn becomes elastic (its rows may be violated at a cost) while the others stay
    /// hard. If no single family suffices, every row is made elastic and the families
    /// violated at the elastic optimum are reported.
    fn diagnose_infeasibility(&self) -> LpError {
        let mut families: Vec<&'static str> = Vec::new();
        for row in &self.rows {
            if !families.contains(&row.family) {
                families.push(row.family);
            }
        }
        let culprits: Vec<String> = families
            .iter()
            .filter(
                |f| matches!(self.elastic_solve(|row| row.family == **f), Some(v) if !v.is_empty()),
            )
            .map(|f| f.to_string())
            .collect();
        if !culprits.is_empty() {
            return LpError::Infeasible { families: culprits };
        }
        match self.elastic_solve(|_| true) {
            Some(v) => LpError::Infeasible {
                families: v.into_iter().map(str::to_string).collect(),
            },
            // With every row elastic only the variable bounds can conflict.
            None => LpError::Infeasible {
                families: vec!["variable bounds".to_string()],
            },
        }
    }

    /// Solves a copy where the rows selected by `elastic` may be violated at unit cost.
    /// Returns the families violated at the optimum, or `None` if still infeasible.
    fn elastic_solve(&self, elastic: impl Fn(&Row) -> bool) -> Option<Vec<&'static str>> {
        let mut columns: Vec<Column> = self
            .columns
            .iter()
            .map(|c| Column {
                cost: 0.0,
                ..c.clone()
            })
            .collect();
        let mut rows = self.rows.clone();
        let mut slack_family = Vec::new();
        for row in rows.iter_mut().filter(|r| elastic(r)) {
            // Two slacks so that both equality directions can be violated.
            let plus = columns.len();
            let minus = plus + 1;
            for _ in 0..2 {
                columns.push(Column {
                    cost: 1.0,
                    lower: 0.0,
                    upper: f64::INFINITY,
                });
            }
            row.terms.push((plus, 1.0));
            row.terms.push((minus, -1.0));
            slack_family.push((plus, minus, row.family));
        }
        match run_highs(&columns, &rows, Sense::Minimise, &SolverOptions::default()) {
            Ok((HighsModelStatus::Optimal, values, _)) => {
                let mut violated: Vec<&'static str> = Vec::new();
                for (plus, minus, family) in slack_family {
                    if values[plus] + values[minus] > SLACK_TOL && !violated.contains(&family) {
                        violated.push(family);
                    }
                }
                Some(violated)
            }
            _ => None,
        }
    }
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Direction::Minimise => f.write_str("minimise"),
            Direction::Maximise => f.write_str("maximise"),
        }
    }
}

fn empty_model_value(c: &Column, sense: Sense) -> f64 {
    let prefer_low = match sense {
        Sense::Minimise => c.cost >= 0.0,
        Sense::Maximise => c.cost <= 0.0,
    };
    let pick = if prefer_low { c.lower } else { c.upper };
    if pick.is_finite() {
        pick
    } else if c.lower.is_finite() {
        c.lower
    } else if c.upper.is_finite() {
        c.upper
    } else {
        0.0
    }
}

fn run_highs(
    columns: &[Column],
    rows: &[Row],
    sense: Sense,
    options: &SolverOptions,
) -> Result<(HighsModelStatus, Vec<f64>, f64), LpError> {
    let mut pb = RowProblem::default();
    let cols: Vec<highs::Col> = columns
        .iter()
        .map(|c| pb.add_column(c.cost, c.lower..=c.upper))
        .collect();
    for r in rows {
        pb.add_row(
            r.lower..=r.upper,
            r.terms.iter().map(|&(v, coef)| (cols[v], coef)),
        );
    }
    let mut model = pb
        .try_optimise(sense)
        .map_err(|s| LpError::Solver(format!("HiGHS rejected the model: {s:?}")))?;
    model.make_quiet();
    // The machines this runs on are small and shared; a thread pool buys nothing for
    // the model sizes here.
    let _ = model.try_set_option("threads", 1);
    let (solver, strategy) = match options.method {
        Method::Choose => ("choose", None),
        Method::DualSimplex => ("simplex", Some(1)),
        Method::PrimalSimplex => ("simplex", Some(4)),
        Method::Ipm => ("ipm", None),
    };
    fn set<E: fmt::Debug>(r: Result<(), E>, name: &str) -> Result<(), LpError> {
        r.map_err(|e| LpError::Solver(format!("HiGHS rejected option {name}: {e:?}")))
    }
    // Options left at HiGHS's defaults are not touched, so `solve()` behaves exactly as
    // before options existed.
    if options.method != Method::Choose {
        set(model.try_set_option("solver", solver), "solver")?;
    }
    if let Some(st) = strategy {
        set(
            model.try_set_option("simplex_strategy", st),
            "simplex_strategy",
        )?;
    }
    if !options.presolve {
        set(model.try_set_option("presolve", "off"), "presolve")?;
    }
    if options.parallel {
        set(model.try_set_option("parallel", "on"), "parallel")?;
    }
    if !options.crossover {
        set(
            model.try_set_option("run_crossover", "off"),
            "run_crossover",
        )?;
    }
    let solved = model
        .try_solve()
        .map_err(|s| LpError::Solver(format!("HiGHS failed to solve: {s:?}")))?;
    let status = solved.status();
    let values = if status == HighsModelStatus::Optimal {
        solved.get_solution().columns().to_vec()
    } else {
        Vec::new()
    };
    Ok((status, values, solved.objective_value()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn solves_a_small_lp() {
        // max x + y s.t. x + 2y <= 4, 3x + y <= 6 -> x = 1.6, y = 1.2.
        let mut lp = LinearProgram::new(Direction::Maximise);
        let x = lp.add_var(1.0, 0.0, f64::INFINITY);
        let y = lp.add_var(1.0, 0.0, f64::INFINITY);
        lp.add_constraint("a", f64::NEG_INFINITY, 4.0, [(x, 1.0), (y, 2.0)]);
        lp.add_constraint("b", f64::NEG_INFINITY, 6.0, [(x, 3.0), (y, 1.0)]);
        let s = lp.solve().unwrap();
        assert!((s.value(x) - 1.6).abs() < 1e-7);
        assert!((s.value(y) - 1.2).abs() < 1e-7);
        assert!((s.objective() - 2.8).abs() < 1e-7);
    }

    #[test]
    fn names_the_conflicting_family() {
        let mut lp = LinearProgram::new(Direction::Minimise);
        let x = lp.add_var(1.0, 0.0, 10.0);
        let y = lp.add_var(1.0, 0.0, 10.0);
        lp.add_constraint("harmless", f64::NEG_INFINITY, 100.0, [(x, 1.0)]);
        lp.add_constraint("coverage", 5.0, f64::INFINITY, [(x, 1.0), (y, 1.0)]);
        lp.add_constraint("capacity", f64::NEG_INFINITY, 3.0, [(x, 1.0), (y, 1.0)]);
        match lp.solve() {
            Err(LpError::Infeasible { families }) => {
                assert!(!families.contains(&"harmless".to_string()));
                assert!(
                    families.contains(&"coverage".to_string())
                        || families.contains(&"capacity".to_string())
                );
            }
            other => panic!("expected infeasible, got {other:?}"),
        }
    }

    #[test]
    fn reports_unbounded() {
        let mut lp = LinearProgram::new(Direction::Maximise);
        let x = lp.add_var(1.0, 0.0, f64::INFINITY);
        lp.add_constraint("floor", 1.0, f64::INFINITY, [(x, 1.0)]);
        assert_eq!(lp.solve().unwrap_err(), LpError::Unbounded);
    }

    #[test]
    fn rejects_nan_and_crossed_bounds() {
        let mut lp = LinearProgram::new(Direction::Minimise);
        lp.add_var(f64::NAN, 0.0, 1.0);
        assert!(matches!(lp.solve(), Err(LpError::InvalidModel(_))));
        let mut lp = LinearProgram::new(Direction::Minimise);
        let x = lp.add_var(1.0, 0.0, 1.0);
        lp.add_constraint("crossed", 2.0, 1.0, [(x, 1.0)]);
        assert_eq!(
            lp.solve().unwrap_err(),
            LpError::Infeasible {
                families: vec!["crossed".into()]
            }
        );
    }
}
