// skc: the command-line tool of skc. One CLI::App holds every command; each command's file adds it
// (commands.hpp), and main runs the one given:
//
//   skc compile --ops DIR --base DIR --compiler PATH --device NAME --toolchain-version VER [...]
//   skc uninstall --op-library DIR [PACKAGE]
//   skc ops inspect DIR [--blacklist SUBSTR]... [--json]
//   skc cache stats|ls|verify|prune|clear|config|zero|explain|export|import [...]
//   skc help [COMMAND...] | skc --help | skc --version
//
// Help goes to standard output with exit status 0. Bad usage (an unknown command or option, a
// missing or malformed value) is exit status 2, with the command and what is wrong on standard error
// and, for the command line, a line pointing to the command's --help. The other exit statuses are
// each command's own (docs/cli.md).
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include <skc/config.hpp>

#include "cli.hpp"
#include "commands.hpp"
#include "common.hpp"

namespace {

using namespace skc_tool;

/// The commands of `app` (empty for a command that has none).
std::vector<const CLI::App*> commands_of(const CLI::App* app) {
    return app->get_subcommands([](const CLI::App* a) { return !a->get_name().empty(); });
}

std::string names_of(const std::vector<const CLI::App*>& commands) {
    std::string r;
    for (const CLI::App* c : commands) r += (r.empty() ? "" : ", ") + c->get_name();
    return r;
}

/// The command given: the last one parsed, on the way from skc down.
const CLI::App* given_command(const CLI::App& skc) {
    const CLI::App* a = &skc;
    while (!a->get_subcommands().empty()) a = a->get_subcommands().front();
    return a;
}

std::string help_of(const CLI::App* app) {
    return app->get_formatter()->make_help(app, command_path(app), CLI::AppFormatMode::Normal);
}

/// What is wrong with an argument that no command took.
std::string unexpected(const CLI::App* at, const std::string& arg) {
    if (arg.size() > 1 && arg[0] == '-') {
        const std::string name = arg.substr(0, arg.find('='));
        std::string r = "unknown option '" + printable(name) + "'";
        // An option of a command beside this one: say which take it.
        if (const CLI::App* parent = at->get_parent(); parent != nullptr && name.size() > 2) {
            std::vector<std::string> takers;
            for (const CLI::App* c : commands_of(parent))
                if (c != at && c->get_option_no_throw(name) != nullptr) takers.push_back("'" + command_path(c) + "'");
            for (std::size_t i = 0; i < takers.size(); ++i)
                r += (i == 0 ? "; it applies only to " : i + 1 == takers.size() ? " and " : ", ") + takers[i];
        }
        return r;
    }
    const std::vector<const CLI::App*> commands = commands_of(at);
    if (!commands.empty()) return "unknown command '" + printable(arg) + "'; commands: " + names_of(commands);
    return "unexpected argument '" + printable(arg) + "'";
}

/// Bad usage: `message` after the command on standard error and, with `hint`, where its usage is.
int usage_error(const CLI::App* at, const std::string& message, bool hint) {
    std::string r = command_path(at) + ": " + message + "\n";
    // `skc help` names commands: its hint is the list of commands, skc's usage.
    const CLI::App* usage = at->get_name() == "help" && at->get_parent() != nullptr ? at->get_parent() : at;
    if (hint)
        r += "run '" + command_path(usage) + " --help' for the " +
             (commands_of(usage).empty() ? "options" : "commands") + "\n";
    std::fflush(stdout);
    std::fputs(r.c_str(), stderr);
    return exit_usage;
}

/// The message of a parse error: an argument no command took comes first (CLI11 checks required
/// options before it), then CLI11's own message.
std::string parse_message(const CLI::App& skc, const CLI::App* at, const CLI::ParseError& e) {
    for (const CLI::App* a = &skc;; a = a->get_subcommands().front()) {
        if (const std::vector<std::string> left = a->remaining(); !left.empty()) return unexpected(a, left.front());
        if (a == at) break;
    }
    if (dynamic_cast<const CLI::RequiredError*>(&e) != nullptr && !commands_of(at).empty() &&
        at->get_subcommands().empty())
        return "no command given; commands: " + names_of(commands_of(at));
    return e.what();
}

/// `skc help [COMMAND...]`: the usage of skc or of a command, as --help prints it.
void add_help(CLI::App& skc, Action& action) {
    const auto names = std::make_shared<std::vector<std::string>>();
    CLI::App* help = skc.add_subcommand("help", "show the usage of skc or of a command, e.g. skc help cache prune");
    help->add_option("COMMAND", *names, "the command (and its command) whose usage to show")->type_name("");
    help->callback([&skc, &action, names] {
        action = [&skc, names] {
            const CLI::App* at = &skc;
            for (const std::string& name : *names) {
                const CLI::App* next = nullptr;
                for (const CLI::App* c : commands_of(at))
                    if (c->get_name() == name) next = c;
                if (next == nullptr)
                    throw UsageError{"unknown command '" + printable(name) + "'" +
                                     (commands_of(at).empty()
                                          ? "; '" + command_path(at) + "' has no commands"
                                          : "; commands of '" + command_path(at) + "': " + names_of(commands_of(at)))};
                at = next;
            }
            out(help_of(at));
            return exit_ok;
        };
    });
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App skc(
        "The command-line tool of skc: compiles folders of op info files into run packages, installs and "
        "removes them, and maintains the package cache.",
        "skc");
    skc.get_formatter()->column_width(36);
    skc.get_formatter()->label("SUBCOMMAND", "COMMAND");
    skc.set_help_flag("-h,--help", "print this usage and exit");
    skc.set_version_flag("--version", "skc " SKC_VERSION_STRING, "print the version and exit");
    skc.require_subcommand(1);
    skc.footer("'skc <command> --help' or 'skc help <command>' shows a command's usage.");
    Action action;
    add_compile(skc, action);
    add_ops(skc, action);
    add_uninstall(skc, action);
    add_cache(skc, action);
    add_help(skc, action);
    // "Commands:" in every usage, not CLI11's "Subcommands:".
    for (CLI::App* c : skc.get_subcommands([](CLI::App*) { return true; })) {
        c->group("Commands");
        for (CLI::App* sub : c->get_subcommands([](CLI::App*) { return true; })) sub->group("Commands");
    }
    try {
        skc.parse(argc, argv);
    } catch (const CLI::CallForHelp&) {
        out(help_of(given_command(skc)));
        return exit_ok;
    } catch (const CLI::CallForVersion& e) {
        out(std::string(e.what()) + "\n");
        return exit_ok;
    } catch (const CLI::ParseError& e) {
        const CLI::App* at = given_command(skc);
        return usage_error(at, parse_message(skc, at, e), true);
    }
    try {
        return action();
    } catch (const UsageError& e) {
        return usage_error(given_command(skc), e.message, e.hint);
    } catch (const std::exception& e) {
        std::fflush(stdout);
        std::fprintf(stderr, "skc: %s\n", printable(e.what()).c_str());
        return exit_failed;
    }
}
