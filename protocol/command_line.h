#pragma once
// Man-style --help and --version for every program and dlion subcommand,
// over QCommandLineParser (which still parses; this only words the output).
#include <QCommandLineParser>
#include <QStringList>

namespace dlion::cmdline {

struct Page {
    QString name;        // "dlion run"
    QString summary;     // one line, after the name
    QString synopsis;    // "dlion run [OPTIONS]"
    QString description; // paragraphs
    QStringList examples;
    QString exitStatus;  // "0 success, 1 ..., 2 bad usage"
};

// NAME, SYNOPSIS, DESCRIPTION, OPTIONS (from the parser), EXAMPLES, EXIT STATUS.
QString manText(const Page &page, const QCommandLineParser &parser);

// Adds -h/--help and --version, parses args (args[0] is the program). Returns
// true when the caller should go on; otherwise *exitCode is set: 0 after
// printing the help or "PROGRAM VERSION", 2 after naming a usage error on stderr.
bool parse(const Page &page, QCommandLineParser &parser, const QStringList &args, int *exitCode);

} // namespace dlion::cmdline
