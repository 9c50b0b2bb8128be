#pragma once
// The one schema of every strategy and its knobs (the job's
// "strategy_options"): name, type, default, range and help. The engine reads
// knobs through it, JobSpec validates them with it, the job editor builds its
// fields from it and `dlion knobs` prints it.
#include <QJsonObject>
#include <QList>
#include <QString>
#include <QStringList>

namespace dlion::protocol {

struct KnobChoice {
    QString value;
    QString label;
};

struct Knob {
    enum class Type { Integer, Number, Flag, Choice };
    QString name;
    Type type = Type::Number;
    // Null when the default follows from other job fields; `help` says how,
    // and the knob is then left out of the job unless set.
    QJsonValue defaultValue;
    double lo = 0, hi = 0;  // Integer and Number
    QList<KnobChoice> choices;  // Choice
    QString label;  // short, for forms
    QString help;
    QString unit;       // as shown in forms, e.g. " rounds"
    double scale = 1;   // forms show value × scale (100 for a fraction in %)
    int decimals = 2;   // Number, in form units
    QString lowestText; // forms show this for the lowest value (e.g. "auto")
    QString needs;      // a Flag knob this one only matters with

    bool derivedDefault() const { return defaultValue.isNull(); }
    // The allowed values in words, e.g. "a whole number from 0 to 64".
    QString rangeText() const;
};

struct StrategyInfo {
    QString name;
    QString title;  // one line
    QList<Knob> knobs;
};

const QList<StrategyInfo> &strategies();
QStringList strategyNames();
const StrategyInfo *findStrategy(const QString &name);
const Knob *findKnob(const QString &strategy, const QString &knob);

// Null when every knob in `options` is one of the strategy's and within its
// range; otherwise a message naming the knob and what is allowed.
QString checkKnobs(const QString &strategy, const QJsonObject &options);

// The knob's value in `options`, else its default (Null for a derived
// default). The knob must be in the strategy's schema.
QJsonValue knobValue(const QString &strategy, const QJsonObject &options, const QString &knob);

// Every strategy with its knobs, for the CLI's help.
QString knobsHelp();

} // namespace dlion::protocol
