//! NFaaS placement's reproduction: tenant- versus service-centric server counts.

use super::*;

/// Files and summary of a reproduction.
pub struct NfaasReport {
    /// `(file name, contents)`.
    pub files: Vec<(String, String)>,
    /// Human summary.
    pub summary: String,
}

/// Computes NFaaS Fig. 5 (a: small servers, large customers, growing count; b: large
/// servers per customer type; c: mixed customers per server type).
pub fn nfaas_report(customers: usize, seed: u64) -> Result<NfaasReport, SimError> {
    let mut files = Vec::new();
    let mut summary = String::new();
    let names = vec![
        "tenant-centric".to_string(),
        "service-centric".to_string(),
        "service-centric (dedicated)".to_string(),
    ];
    let header = "tenant_centric,service_centric,service_dedicated,saving_pct\n";

    // (a)
    let steps: Vec<usize> = (1..=10)
        .map(|i| customers * i / 10)
        .filter(|&n| n > 0)
        .collect();
    let mut csv = format!("customers,{header}");
    let mut vals = vec![Vec::new(); 3];
    let mut cats = Vec::new();
    for &n in &steps {
        let c = count_servers(&vec![CustomerType::Large; n], ServerType::Small)?;
        let _ = writeln!(
            csv,
            "{n},{},{},{},{:.1}",
            c.tenant,
            c.service,
            c.service_dedicated,
            c.saving_pct()
        );
        vals[0].push(c.tenant as f64);
        vals[1].push(c.service as f64);
        vals[2].push(c.service_dedicated as f64);
        cats.push(n.to_string());
    }
    files.push(("fig5a_small_servers_large_customers.csv".into(), csv));
    files.push((
        "fig5a_small_servers_large_customers.svg".into(),
        bar_chart(
            &Labels {
                title: "Fig. 5a: small servers, large customers".into(),
                x: "customers".into(),
                y: "servers".into(),
            },
            &cats,
            &names,
            &vals,
        ),
    ));

    // (b)
    let mut csv = format!("customer_type,{header}");
    let mut vals = vec![Vec::new(); 3];
    let mut cats = Vec::new();
    let _ = writeln!(summary, "Fig. 5b: {customers} customers on large servers");
    let _ = writeln!(
        summary,
        "{:<10} {:>8} {:>8} {:>10} {:>9}",
        "customer", "tenant", "service", "dedicated", "saving%"
    );
    for t in CustomerType::ALL {
        let c = count_servers(&vec![t; customers], ServerType::Large)?;
        let _ = writeln!(
            csv,
            "{},{},{},{},{:.1}",
            t.name(),
            c.tenant,
            c.service,
            c.service_dedicated,
            c.saving_pct()
        );
        let _ = writeln!(
            summary,
            "{:<10} {:>8} {:>8} {:>10} {:>9.1}",
            t.name(),
            c.tenant,
            c.service,
            c.service_dedicated,
            c.saving_pct()
        );
        vals[0].push(c.tenant as f64);
        vals[1].push(c.service as f64);
        vals[2].push(c.service_dedicated as f64);
        cats.push(t.name().to_string());
    }
    files.push(("fig5b_large_servers_by_customer_type.csv".into(), csv));
    files.push((
        "fig5b_large_servers_by_customer_type.svg".into(),
        bar_chart(
            &Labels {
                title: "Fig. 5b: large servers by customer type".into(),
                x: "customer type".into(),
                y: "servers".into(),
            },
            &cats,
            &names,
            &vals,
        ),
    ));

    // (c)
    let mix = mixed_customers(customers, seed);
    let mut csv = format!("server_type,{header}");
    let mut vals = vec![Vec::new(); 3];
    let mut cats = Vec::new();
    let _ = writeln!(
        summary,
        "Fig. 5c: {customers} mixed customers (seed {seed})"
    );
    let _ = writeln!(
        summary,
        "{:<10} {:>8} {:>8} {:>10} {:>9}",
        "server", "tenant", "service", "dedicated", "saving%"
    );
    for s in ServerType::ALL {
        let c = count_servers(&mix, s)?;
        let _ = writeln!(
            csv,
            "{},{},{},{},{:.1}",
            s.name(),
            c.tenant,
            c.service,
            c.service_dedicated,
            c.saving_pct()
        );
        let _ = writeln!(
            summary,
            "{:<10} {:>8} {:>8} {:>10} {:>9.1}",
            s.name(),
            c.tenant,
            c.service,
            c.service_dedicated,
            c.saving_pct()
        );
        vals[0].push(c.tenant as f64);
        vals[1].push(c.service as f64);
        vals[2].push(c.service_dedicated as f64);
        cats.push(s.name().to_string());
    }
    files.push(("fig5c_mixed_customers_by_server_type.csv".into(), csv));
    files.push((
        "fig5c_mixed_customers_by_server_type.svg".into(),
        bar_chart(
            &Labels {
                title: "Fig. 5c: mixed customers by server type".into(),
                x: "server type".into(),
                y: "servers".into(),
            },
            &cats,
            &names,
            &vals,
        ),
    ));
    let a = count_servers(&vec![CustomerType::Large; customers], ServerType::Small)?;
    summary.insert_str(
        0,
        &format!(
            "Fig. 5a: {customers} large customers on small servers: tenant {} service {} (saving {:.1}%)\n",
            a.tenant,
            a.service,
            a.saving_pct()
        ),
    );
    Ok(NfaasReport { files, summary })
}
