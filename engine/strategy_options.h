#pragma once

#include "engine_error.h"

#include <strategy_knobs.h>

#include <QJsonObject>

#include <optional>

namespace dlion::engine {

// Typed access to a strategy's knobs (the job's "strategy_options") through
// the knob schema (protocol/strategy_knobs.h): its checks, and its default
// for a knob the job leaves out. Unknown knobs are refused so a typo is not
// silently ignored.
class StrategyOptions {
public:
    StrategyOptions(const QJsonObject &o, const QString &strategy) : m_o(o), m_strategy(strategy)
    {
        if (const QString why = protocol::checkKnobs(strategy, o); !why.isEmpty())
            throw EngineError(why.toStdString());
    }

    // `derived`: the default of a knob whose schema default is derived from
    // other job fields.
    double number(const char *key, std::optional<double> derived = std::nullopt) const
    {
        const QJsonValue v = value(key);
        return v.isNull() && derived ? *derived : v.toDouble();
    }
    bool flag(const char *key) const { return value(key).toBool(); }
    QString choice(const char *key) const { return value(key).toString(); }

private:
    QJsonValue value(const char *key) const { return protocol::knobValue(m_strategy, m_o, QLatin1String(key)); }

    QJsonObject m_o;
    QString m_strategy;
};

} // namespace dlion::engine
