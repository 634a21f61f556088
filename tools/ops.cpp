// skc ops inspect: what a folder of op info files holds, and what selection would compile.
//
// Prints, per op type, how many files, distinct instances (by content) and distinct input shapes
// there are, whether the type is a tuning target, and how many instances would be selected for
// compilation; then every file that would not be, with the reason. Reads only; writes nothing.
// Exit status: 0 when every file was read, 2 for bad usage or when some file is not a valid op
// info file (the others are still reported).
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <skc/op_info_io.hpp>
#include <skc/select.hpp>

#include "cli.hpp"
#include "commands.hpp"
#include "common.hpp"

namespace skc_tool {

namespace {

struct InspectArgs {
    std::string dir;
    std::vector<std::string> blacklist;
    bool json = false;
};

struct TypeStats {
    std::size_t files = 0;
    std::set<skc::Digest> distinct;
    std::set<std::string> shapes;
    std::size_t selected = 0;
    std::map<std::string, std::size_t> not_selected;  // reason -> count
};

std::string dims(const skc::RuntimeShape& s) {
    std::string out = "[";
    for (std::size_t i = 0; i < s.rank(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
    return out + "]";
}

/// All input shapes of an op, e.g. "[32,64] [64,192] - -".
std::string input_shapes(const skc::OpRecord& r) {
    std::string out;
    for (const skc::TensorSlot& slot : r.inputs) {
        if (!out.empty()) out += ' ';
        if (const auto* t = std::get_if<skc::TensorDesc>(&slot)) out += dims(t->shape);
        else if (const auto* l = std::get_if<std::vector<skc::TensorDesc>>(&slot)) {
            out += '(';
            for (std::size_t i = 0; i < l->size(); ++i) out += (i ? " " : "") + dims((*l)[i].shape);
            out += ')';
        } else out += '-';
    }
    return out;
}

int run_inspect(const InspectArgs& a) {
    const std::string prefix = "skc ops inspect: ";
    const std::string& dir = a.dir;
    skc::SelectOptions opt;
    opt.blacklist = a.blacklist;
    const bool json = a.json;

    skc::DirReadResult in;
    try {
        in = skc::read_op_info_dir(dir, skc::OnBadFile::collect);
    } catch (const skc::Error& e) {
        std::fprintf(stderr, "%s%s\n", prefix.c_str(), printable(e.what()).c_str());
        return exit_usage;
    }
    const skc::DefaultTargets targets;
    const skc::CompiledSet none;  // a fresh process has compiled nothing
    const std::vector<skc::Decision> decisions = skc::plan_selection(in.ops, opt, none);

    std::map<std::string, TypeStats> by_type;
    std::map<skc::Digest, std::string> first_name;
    std::size_t selected = 0;
    for (std::size_t i = 0; i < in.ops.size(); ++i) {
        const skc::OpRecord& r = in.ops[i].record;
        const skc::Decision& d = decisions[i];
        TypeStats& t = by_type[r.op_type];
        ++t.files;
        t.distinct.insert(d.digest);
        t.shapes.insert(input_shapes(r));
        first_name.emplace(d.digest, d.name);
        if (d.verdict == skc::Verdict::selected) {
            ++t.selected;
            ++selected;
        } else {
            ++t.not_selected[std::string(skc::to_string(d.verdict))];
        }
    }
    std::set<skc::Digest> all_distinct;
    for (const auto& d : decisions) all_distinct.insert(d.digest);

    auto reason = [&](const skc::Decision& d, const skc::OpRecord& r) -> std::string {
        switch (d.verdict) {
        case skc::Verdict::unsupported: return "unsupported: " + r.op_type + " does not support static compilation";
        case skc::Verdict::blacklisted: return "blacklisted: the file name contains a blacklist substring";
        case skc::Verdict::duplicate: return "duplicate: same content as " + first_name.at(d.digest);
        case skc::Verdict::already_compiled: return "already compiled by this process";
        case skc::Verdict::selected: return "selected";
        }
        return {};
    };

    if (json) {
        skc::Object types;
        for (const auto& [type, t] : by_type) {
            skc::Object o;
            o.push_back({"files", t.files});
            o.push_back({"distinct", t.distinct.size()});
            o.push_back({"shapes", t.shapes.size()});
            o.push_back({"target", targets.is_target(type)});
            o.push_back({"selected", t.selected});
            types.push_back({type, skc::Value(std::move(o))});
        }
        skc::Array files;
        for (std::size_t i = 0; i < in.ops.size(); ++i) {
            skc::Object f;
            f.push_back({"file", decisions[i].name});
            f.push_back({"op_type", in.ops[i].record.op_type});
            f.push_back({"digest", decisions[i].digest.hex()});
            f.push_back({"verdict", skc::to_string(decisions[i].verdict)});
            files.emplace_back(std::move(f));
        }
        skc::Array errors;
        for (const skc::Error& e : in.errors) errors.emplace_back(e.what());
        skc::Object root;
        root.push_back({"directory", utf8(dir)});
        root.push_back({"files", in.ops.size()});
        root.push_back({"distinct", all_distinct.size()});
        root.push_back({"selected", selected});
        root.push_back({"op_types", skc::Value(std::move(types))});
        root.push_back({"decisions", skc::Value(std::move(files))});
        root.push_back({"errors", skc::Value(std::move(errors))});
        print_json(std::move(root));
        return in.errors.empty() ? exit_ok : exit_usage;
    }

    std::printf("%zu op info files in %s: %zu distinct ops, %zu selected for compilation\n\n", in.ops.size(),
                printable(dir).c_str(), all_distinct.size(), selected);
    std::printf("%-22s %6s %9s %7s %7s %9s  %s\n", "op type", "files", "distinct", "shapes", "target", "selected",
                "not selected");
    for (const auto& [type, t] : by_type) {
        std::string why;
        for (const auto& [r, n] : t.not_selected) why += (why.empty() ? "" : ", ") + std::to_string(n) + " " + r;
        std::printf("%-22s %6zu %9zu %7zu %7s %9zu%s%s\n", printable(type).c_str(), t.files, t.distinct.size(),
                    t.shapes.size(), targets.is_target(type) ? "yes" : "no", t.selected, why.empty() ? "" : "  ",
                    why.c_str());
    }
    bool header = false;
    for (std::size_t i = 0; i < in.ops.size(); ++i) {
        if (decisions[i].verdict == skc::Verdict::selected) continue;
        if (!header) std::printf("\nNot selected:\n");
        header = true;
        std::printf("  %-40s %s\n", printable(decisions[i].name).c_str(),
                    printable(reason(decisions[i], in.ops[i].record)).c_str());
    }
    if (!in.errors.empty()) {
        std::printf("\nUnreadable files (%zu):\n", in.errors.size());
        for (const skc::Error& e : in.errors) std::printf("  %s\n", printable(e.what()).c_str());
    }
    return in.errors.empty() ? exit_ok : exit_usage;
}

}  // namespace

void add_ops(CLI::App& skc, Action& action) {
    CLI::App* ops =
        skc.add_subcommand("ops", "inspect a folder of op info files: what it holds and what a compile would select");
    ops->require_subcommand(1);
    const auto a = std::make_shared<InspectArgs>();
    CLI::App* inspect = ops->add_subcommand(
        "inspect", "show what the op info files in DIR hold and which ops a compile would select; reads only");
    inspect->footer("exit status: 0 every file was read; 2 bad usage, or some file is not a valid op info file.");
    add_value(*inspect, "DIR", a->dir, "", "the folder of op info files")->required();
    add_values(*inspect, "--blacklist", a->blacklist, "SUBSTR",
               "count files whose name contains SUBSTR as blacklisted");
    add_switch(*inspect, "--json", a->json, "print the result as JSON");
    inspect->callback([&action, a] { action = [a] { return run_inspect(*a); }; });
}

}  // namespace skc_tool
