#pragma once

#include "engine_error.h"

#include <QJsonObject>
#include <QStringList>

#include <cmath>
#include <string>

namespace dlion::engine {

// Typed access to a strategy's knobs (the job's "strategy_options"), with
// errors naming the knob. Unknown knobs are refused so a typo is not
// silently ignored.
class StrategyOptions {
public:
    StrategyOptions(const QJsonObject &o, const QString &strategy, const QStringList &known) : m_o(o)
    {
        for (auto it = o.begin(); it != o.end(); ++it) {
            if (!known.contains(it.key()) && it.key() != QLatin1String("timeout_s"))
                throw EngineError("unknown knob \"strategy_options." + it.key().toStdString() + "\" for strategy "
                                  + strategy.toStdString() + " (known: " + known.join(", ").toStdString() + ")");
        }
    }

    double number(const char *key, double fallback, double lo, double hi) const
    {
        const QJsonValue v = m_o.value(QLatin1String(key));
        if (v.isUndefined())
            return fallback;
        if (!v.isDouble() || !std::isfinite(v.toDouble()) || v.toDouble() < lo || v.toDouble() > hi)
            throw EngineError("field \"strategy_options." + std::string(key) + "\" must be a number from "
                              + std::to_string(lo) + " to " + std::to_string(hi));
        return v.toDouble();
    }

    bool flag(const char *key, bool fallback) const
    {
        const QJsonValue v = m_o.value(QLatin1String(key));
        if (v.isUndefined())
            return fallback;
        if (!v.isBool())
            throw EngineError("field \"strategy_options." + std::string(key) + "\" must be true or false");
        return v.toBool();
    }

private:
    QJsonObject m_o;
};

} // namespace dlion::engine
