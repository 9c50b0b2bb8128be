#include "runs_command.h"

#include "store_access.h"

#include <QJsonArray>
#include <QJsonDocument>

#include <cstdio>
#include <unistd.h>

namespace dlion::cli {

namespace {

QString table(const QList<core::RunInfo> &runs)
{
    const QStringList header = {"id", "created (UTC)", "status", "strategy", "model", "dataset", "workers",
                                "final acc", "train s", "samples/s", "tags"};
    QList<QStringList> rows{header};
    for (const auto &r : runs) {
        rows.append({QString::number(r.id), r.createdAt.toUTC().toString(QStringLiteral("yyyy-MM-dd HH:mm")), r.status,
                     r.strategy, r.model, r.dataset, QString::number(r.workers),
                     QStringLiteral("%1%").arg(100 * r.finalAccuracy, 0, 'f', 2), QString::number(r.trainS, 'f', 1),
                     QString::number(r.samplesPerS, 'f', 0), r.tags.join(QLatin1Char(','))});
    }
    QList<int> width(header.size(), 0);
    for (const auto &row : rows) {
        for (int k = 0; k < row.size(); ++k)
            width[k] = std::max(width[k], int(row[k].size()));
    }
    QString out;
    for (const auto &row : rows) {
        QStringList cells;
        for (int k = 0; k < row.size(); ++k)
            cells << (k == 0 ? row[k].rightJustified(width[k]) : row[k].leftJustified(width[k]));
        QString line = cells.join(QStringLiteral("  "));
        while (line.endsWith(QLatin1Char(' ')))
            line.chop(1);
        out += line + QLatin1Char('\n');
    }
    return out;
}

int deleteRun(core::RunStore &store, const QString &text, bool yes)
{
    int code = 0;
    const auto id = resolveRun(QStringLiteral("runs"), store, text, &code);
    if (!id)
        return code;
    const auto info = store.runInfo(*id);
    if (!yes) {
        if (!isatty(STDIN_FILENO)) {
            stdErr() << "dlion runs: --delete needs --yes when not run from a terminal\n";
            return 2;
        }
        stdOut() << "Delete run " << *id << " (" << info->strategy << ", " << info->model << " on " << info->dataset
                 << ", " << info->createdAt.toUTC().toString(QStringLiteral("yyyy-MM-dd HH:mm 'UTC'"))
                 << ") and all its telemetry? [y/N] ";
        stdOut().flush();
        char answer[16] = {};
        if (!std::fgets(answer, sizeof answer, stdin) || (answer[0] != 'y' && answer[0] != 'Y')) {
            stdOut() << "not deleted\n";
            return 0;
        }
    }
    if (!store.deleteRun(*id)) {
        stdErr() << "dlion runs: " << store.errorString() << "\n";
        return 1;
    }
    stdOut() << "deleted run " << *id << "\n";
    return 0;
}

} // namespace

int runsCommand(const QStringList &args)
{
    const cmdline::Page page{
        QStringLiteral("dlion runs"), QStringLiteral("list, search and delete recorded runs"),
        QStringLiteral("dlion runs [--strategy S] [--tag T] [--status S] [--search TEXT] [--limit N] [--json]\n"
                       "dlion runs --delete RUN [--yes]"),
        QStringLiteral("Lists the runs recorded in the run store, newest first, or deletes one with all\n"
                       "its telemetry. Reading never modifies the store."),
        {QStringLiteral("dlion runs --strategy dlion --limit 5"), QStringLiteral("dlion runs --search wan --json"),
         QStringLiteral("dlion runs --delete 3 --yes")},
        QStringLiteral("0 success, 1 the store cannot be read, 2 bad usage or unknown run id.")};
    QCommandLineParser parser;
    addStoreOption(parser);
    parser.addOption({"strategy", "Only runs of this strategy.", "NAME"});
    parser.addOption({"tag", "Only runs with this tag.", "TAG"});
    parser.addOption({"status", "Only runs with this status (running, finished, failed, interrupted).", "STATUS"});
    parser.addOption({"search", "Runs whose id, strategy, model, dataset, tags, notes or message contain TEXT.", "TEXT"});
    parser.addOption({"limit", "At most N runs.", "N"});
    parser.addOption({"json", "Print JSON (one object per run) instead of a table."});
    parser.addOption({"delete", "Delete run RUN and all its telemetry (asks first; --yes to skip).", "RUN"});
    parser.addOption({"yes", "Do not ask before deleting."});
    int code = 0;
    if (!cmdline::parse(page, parser, args, &code))
        return code;
    if (!parser.positionalArguments().isEmpty()) {
        stdErr() << "dlion runs: unexpected argument \"" << parser.positionalArguments().first() << "\"\n";
        return 2;
    }
    bool limitOk = true;
    const int limit = parser.isSet("limit") ? parser.value("limit").toInt(&limitOk) : 0;
    if (!limitOk || limit < 0) {
        stdErr() << "dlion runs: --limit \"" << parser.value("limit") << "\" is not a positive number\n";
        return 2;
    }
    core::RunStore store;
    if (parser.isSet("delete")) {
        if (!openStore(QStringLiteral("runs"), parser, core::RunStore::Mode::ReadWrite, store, &code))
            return code;
        return deleteRun(store, parser.value("delete"), parser.isSet("yes"));
    }
    if (!store.open(parser.isSet("store") ? parser.value("store") : core::RunStore::defaultPath(),
                    core::RunStore::Mode::ReadOnly)) {
        if (store.error() == core::RunStore::Error::Missing) {
            if (parser.isSet("json"))
                stdOut() << "[]\n";
            else
                stdOut() << "No runs recorded yet (" << store.path() << " does not exist).\n";
            return 0;
        }
        stdErr() << "dlion runs: " << store.errorString() << "\n";
        return 1;
    }
    core::RunFilter filter;
    filter.strategy = parser.value("strategy");
    filter.tag = parser.value("tag");
    filter.status = parser.value("status");
    filter.search = parser.value("search");
    filter.limit = limit;
    const QList<core::RunInfo> runs = store.listRuns(filter);
    if (store.error() != core::RunStore::Error::None) {
        stdErr() << "dlion runs: " << store.errorString() << "\n";
        return 1;
    }
    if (parser.isSet("json")) {
        QJsonArray list;
        for (const auto &r : runs) {
            QJsonObject o = r.toJson();
            o.remove("notes");
            list.append(o);
        }
        stdOut() << QJsonDocument(list).toJson(QJsonDocument::Indented);
        return 0;
    }
    if (runs.isEmpty()) {
        stdOut() << "No runs match (" << store.path() << ").\n";
        return 0;
    }
    stdOut() << table(runs);
    stdOut() << runs.size() << (runs.size() == 1 ? " run" : " runs") << " in " << store.path()
             << ". 'dlion report ID' writes a report; 'dlion compare ID ID...' compares runs.\n";
    return 0;
}

int tagCommand(const QStringList &args)
{
    const cmdline::Page page{
        QStringLiteral("dlion tag"), QStringLiteral("tag a recorded run"), QStringLiteral("dlion tag RUN TAG... [--remove]"),
        QStringLiteral("Adds tags to a recorded run, or removes them with --remove.\n"
                       "RUN is a run id from 'dlion runs', or 'last'."),
        {QStringLiteral("dlion tag last baseline wan"), QStringLiteral("dlion tag 3 wan --remove")},
        QStringLiteral("0 success, 1 the store cannot be written, 2 bad usage or unknown run id.")};
    QCommandLineParser parser;
    addStoreOption(parser);
    parser.addOption({"remove", "Remove the tags instead."});
    parser.addPositionalArgument("RUN", "Run id (see 'dlion runs'), or 'last'.");
    parser.addPositionalArgument("TAG", "One or more tags.", "TAG...");
    int code = 0;
    if (!cmdline::parse(page, parser, args, &code))
        return code;
    const QStringList pos = parser.positionalArguments();
    if (pos.size() < 2) {
        stdErr() << "dlion tag: give a run id and at least one tag (dlion tag RUN TAG...)\n";
        return 2;
    }
    core::RunStore store;
    if (!openStore(QStringLiteral("tag"), parser, core::RunStore::Mode::ReadWrite, store, &code))
        return code;
    const auto id = resolveRun(QStringLiteral("tag"), store, pos[0], &code);
    if (!id)
        return code;
    for (const QString &tag : pos.mid(1)) {
        const bool ok = parser.isSet("remove") ? store.removeTag(*id, tag) : store.addTag(*id, tag);
        if (!ok) {
            stdErr() << "dlion tag: " << store.errorString() << "\n";
            return tag.trimmed().isEmpty() ? 2 : 1;
        }
    }
    stdOut() << "run " << *id << ": " << store.runInfo(*id)->tags.join(QStringLiteral(", ")) << "\n";
    return 0;
}

int noteCommand(const QStringList &args)
{
    const cmdline::Page page{
        QStringLiteral("dlion note"), QStringLiteral("attach a note to a recorded run"), QStringLiteral("dlion note RUN TEXT"),
        QStringLiteral("Attaches a note to a recorded run. RUN is a run id from 'dlion runs', or 'last'."),
        {QStringLiteral("dlion note last \"slow worker on node 3\"")},
        QStringLiteral("0 success, 1 the store cannot be written, 2 bad usage or unknown run id.")};
    QCommandLineParser parser;
    addStoreOption(parser);
    parser.addPositionalArgument("RUN", "Run id (see 'dlion runs'), or 'last'.");
    parser.addPositionalArgument("TEXT", "The note.");
    int code = 0;
    if (!cmdline::parse(page, parser, args, &code))
        return code;
    const QStringList pos = parser.positionalArguments();
    if (pos.size() < 2 || pos.mid(1).join(QLatin1Char(' ')).trimmed().isEmpty()) {
        stdErr() << "dlion note: give a run id and the note text (dlion note RUN TEXT)\n";
        return 2;
    }
    core::RunStore store;
    if (!openStore(QStringLiteral("note"), parser, core::RunStore::Mode::ReadWrite, store, &code))
        return code;
    const auto id = resolveRun(QStringLiteral("note"), store, pos[0], &code);
    if (!id)
        return code;
    if (!store.addNote(*id, pos.mid(1).join(QLatin1Char(' ')))) {
        stdErr() << "dlion note: " << store.errorString() << "\n";
        return 1;
    }
    stdOut() << "note added to run " << *id << "\n";
    return 0;
}

} // namespace dlion::cli
