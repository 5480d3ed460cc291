//! PNG plots of benchmark results: a throughput–latency curve for a sweep over
//! the offered rate, throughput per value for any other sweep, and throughput
//! over time for a single run.

use crate::bench_run::RunResult;
use anyhow::{anyhow, Result};
use plotters::prelude::*;
use std::path::Path;
use std::sync::Once;

static FONT: Once = Once::new();

fn register_font() {
    FONT.call_once(|| {
        // Embedded so plots render on machines without system fonts.
        let _ = plotters::style::register_font(
            "sans-serif",
            FontStyle::Normal,
            include_bytes!("../assets/DejaVuSans.ttf"),
        );
    });
}

pub fn plot(path: &Path, results: &[RunResult], sweep: Option<&str>) -> Result<()> {
    register_font();
    let root = BitMapBackend::new(path, (960, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    let title = match sweep {
        Some(s) => format!("chorus bench — sweep {s}"),
        None => "chorus bench — throughput over time".to_string(),
    };
    let param = sweep
        .and_then(|s| s.split_once('='))
        .map(|(k, _)| k.trim().to_string());
    match (param.as_deref(), results.len()) {
        (Some("rate"), _) => curve(&root, &title, results),
        (Some(_), _) => bars(&root, &title, results),
        (None, _) => timeline(&root, &title, &results[0]),
    }
    .map_err(|e| anyhow!("plotting: {e}"))?;
    root.present().map_err(|e| anyhow!("{e}"))?;
    Ok(())
}

type Area<'a> = DrawingArea<BitMapBackend<'a>, plotters::coord::Shift>;

fn curve(root: &Area, title: &str, rs: &[RunResult]) -> Result<(), Box<dyn std::error::Error>> {
    let xmax = rs.iter().map(|r| r.throughput_ops).fold(1.0, f64::max) * 1.1;
    let ymax = rs.iter().map(|r| r.p99_ms).fold(1.0, f64::max) * 1.1;
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 24))
        .margin(20)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..xmax, 0.0..ymax)?;
    chart
        .configure_mesh()
        .x_desc("throughput (ops/s)")
        .y_desc("latency (ms)")
        .draw()?;
    let p50: Vec<(f64, f64)> = rs.iter().map(|r| (r.throughput_ops, r.p50_ms)).collect();
    let p99: Vec<(f64, f64)> = rs.iter().map(|r| (r.throughput_ops, r.p99_ms)).collect();
    chart
        .draw_series(LineSeries::new(p50.clone(), BLUE.stroke_width(2)))?
        .label("p50")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE));
    chart.draw_series(p50.iter().map(|p| Circle::new(*p, 4, BLUE.filled())))?;
    chart
        .draw_series(LineSeries::new(p99.clone(), RED.stroke_width(2)))?
        .label("p99")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED));
    chart.draw_series(p99.iter().map(|p| Circle::new(*p, 4, RED.filled())))?;
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE)
        .draw()?;
    Ok(())
}

fn bars(root: &Area, title: &str, rs: &[RunResult]) -> Result<(), Box<dyn std::error::Error>> {
    let ymax = rs.iter().map(|r| r.throughput_ops).fold(1.0, f64::max) * 1.15;
    let n = rs.len();
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 24))
        .margin(20)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..n as f64, 0.0..ymax)?;
    let names: Vec<String> = rs.iter().map(|r| r.name.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.floor() as usize;
            if (x - i as f64 - 0.5).abs() < 0.26 {
                names.get(i).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc("throughput (ops/s)")
        .draw()?;
    chart.draw_series(rs.iter().enumerate().map(|(i, r)| {
        Rectangle::new(
            [(i as f64 + 0.15, 0.0), (i as f64 + 0.85, r.throughput_ops)],
            BLUE.mix(0.7).filled(),
        )
    }))?;
    chart.draw_series(rs.iter().enumerate().map(|(i, r)| {
        Text::new(
            format!("{:.0}", r.throughput_ops),
            (i as f64 + 0.3, r.throughput_ops + ymax * 0.02),
            ("sans-serif", 16),
        )
    }))?;
    Ok(())
}

fn timeline(root: &Area, title: &str, r: &RunResult) -> Result<(), Box<dyn std::error::Error>> {
    let xmax = r.timeline.last().map(|t| t.0).unwrap_or(1.0).max(1.0);
    let ymax = r.timeline.iter().map(|t| t.1).fold(1.0, f64::max) * 1.15;
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 24))
        .margin(20)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..xmax, 0.0..ymax)?;
    chart.configure_mesh().x_desc("seconds").y_desc("ops/s").draw()?;
    chart.draw_series(LineSeries::new(r.timeline.clone(), BLUE.stroke_width(2)))?;
    Ok(())
}

/// Throughput over time of every run of a sweep, one line each, with the
/// moment of a `--kill-replica` marked.
pub fn plot_timelines(path: &Path, results: &[RunResult], sweep: &str) -> Result<()> {
    register_font();
    let root = BitMapBackend::new(path, (960, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    let draw = || -> Result<(), Box<dyn std::error::Error>> {
        let xmax = results
            .iter()
            .filter_map(|r| r.timeline.last().map(|t| t.0))
            .fold(1.0, f64::max);
        let ymax = results
            .iter()
            .flat_map(|r| r.timeline.iter().map(|t| t.1))
            .fold(1.0, f64::max)
            * 1.15;
        let title = match results.iter().find_map(|r| r.killed) {
            Some((victim, _)) => format!("throughput over time, {sweep}, replica {victim} killed"),
            None => format!("throughput over time, {sweep}"),
        };
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 22))
            .margin(20)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..xmax, 0.0..ymax)?;
        chart.configure_mesh().x_desc("seconds").y_desc("ops/s").draw()?;
        let colors = [BLUE, RED, GREEN, MAGENTA, CYAN, BLACK];
        for (i, r) in results.iter().enumerate() {
            let color = colors[i % colors.len()];
            chart
                .draw_series(LineSeries::new(r.timeline.clone(), color.stroke_width(2)))?
                .label(r.name.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
            if let Some((_, at)) = r.killed {
                chart.draw_series(LineSeries::new(
                    vec![(at, 0.0), (at, ymax)],
                    color.mix(0.4).stroke_width(1),
                ))?;
            }
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
        Ok(())
    };
    draw().map_err(|e| anyhow!("plotting: {e}"))?;
    root.present().map_err(|e| anyhow!("{e}"))?;
    Ok(())
}

/// CBASE Fig. 5(b)-style plot: throughput of both executors per parallelism factor.
pub fn plot_exec(
    path: &Path,
    service: &str,
    sleep_us: u64,
    workers: usize,
    pts: &[(u32, f64, f64)],
) -> Result<()> {
    register_font();
    let root = BitMapBackend::new(path, (960, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    let draw = || -> Result<(), Box<dyn std::error::Error>> {
        let xs: Vec<f64> = pts.iter().map(|p| (p.0.max(1) as f64).log2()).collect();
        let xmax = xs.iter().cloned().fold(1.0, f64::max) + 0.5;
        let ymax = pts.iter().map(|p| p.2.max(p.1)).fold(1.0, f64::max) * 1.15;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!("executors alone: {service} ({sleep_us} µs/op), {workers} workers"),
                ("sans-serif", 24),
            )
            .margin(20)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(-0.5..xmax, 0.0..ymax)?;
        chart
            .configure_mesh()
            .x_desc("parallelism factor (log2)")
            .y_desc("ops/s")
            .x_label_formatter(&|x| format!("{}", 2f64.powf(*x).round()))
            .draw()?;
        let seq: Vec<(f64, f64)> = xs.iter().zip(pts).map(|(x, p)| (*x, p.1)).collect();
        let par: Vec<(f64, f64)> = xs.iter().zip(pts).map(|(x, p)| (*x, p.2)).collect();
        chart
            .draw_series(LineSeries::new(par.clone(), BLUE.stroke_width(2)))?
            .label("parallel (CBASE)")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE));
        chart.draw_series(par.iter().map(|p| Circle::new(*p, 4, BLUE.filled())))?;
        chart
            .draw_series(LineSeries::new(seq.clone(), RED.stroke_width(2)))?
            .label("sequential")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED));
        chart.draw_series(seq.iter().map(|p| Circle::new(*p, 4, RED.filled())))?;
        chart
            .configure_series_labels()
            .border_style(BLACK)
            .background_style(WHITE)
            .draw()?;
        Ok(())
    };
    draw().map_err(|e| anyhow!("plotting: {e}"))?;
    root.present().map_err(|e| anyhow!("{e}"))?;
    Ok(())
}
