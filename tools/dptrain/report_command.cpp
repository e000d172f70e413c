// `dptrain report DIR`: the run in DIR (its metrics.jsonl, and its timeline when there is one) as
// one self-contained HTML page, DIR/report.html unless -o names another file.

#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "command.h"
#include "run_report.h"
#include "dptrain/common/error.h"

namespace dpt::cli {

namespace {

struct ReportFlags {
  std::string dir;
  std::optional<std::string> timeline;
  std::optional<std::string> output;
};

int run_report(const ReportFlags& flags) {
  report::RunFiles files(flags.dir);
  if (flags.timeline) files.timeline(*flags.timeline);
  const report::RunRecords run = report::read_run(files);
  const std::filesystem::path output =
      flags.output ? std::filesystem::path(*flags.output) : std::filesystem::path(flags.dir) / "report.html";
  {
    std::ofstream out(output, std::ios::binary | std::ios::trunc);
    out << report::render_report(run);
    DPT_CHECK(out.good(), ConfigError, "cannot write ", output.string(), "; check -o and its folder's permissions");
  }
  std::cout << "dptrain report: wrote " << output.string() << " (" << run.step_loss.size() << " logged steps, "
            << run.val_acc1.size() << " validation pass(es), "
            << (run.ranks.empty() ? std::string("no timeline") : std::to_string(run.ranks.size()) + " rank timeline(s)")
            << ")" << std::endl;
  return 0;
}

}  // namespace

Command add_report_command(CLI::App& root) {
  auto flags = std::make_shared<ReportFlags>();
  CLI::App* app = root.add_subcommand(
      "report", "Write one self-contained HTML page about a run: loss, top-1, learning rate and images/s by step "
                "and epoch, and with a timeline each rank's mean step broken into its parts");
  app->add_option("dir", flags->dir, "the run's folder (dptrain train --output): its metrics.jsonl is read")
      ->required();
  app->add_option("--timeline", flags->timeline,
                  "the path given to dptrain train --timeline (default: DIR/timeline.json, when its ranks' "
                  "files are there)");
  app->add_option("-o,--output", flags->output, "the page (default: DIR/report.html)");
  return {app, [flags](const std::vector<std::string>&) { return run_report(*flags); }};
}

}  // namespace dpt::cli
