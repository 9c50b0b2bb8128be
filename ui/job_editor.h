#pragma once

#include <strategy_knobs.h>

#include <QHash>
#include <QJsonObject>
#include <QWidget>

class QComboBox;
class QDoubleSpinBox;
class QLineEdit;
class QSpinBox;
class QStackedWidget;

namespace dlion::ui {

// The job: dataset and partition, model, strategy with its knobs, DLion's
// techniques on or off, and the budget. `job()` gives the job file's keys
// (JobSpec JSON); `markField()` shows a validation error at the input it
// names.
class JobEditor : public QWidget {
    Q_OBJECT
public:
    explicit JobEditor(QWidget *parent = nullptr);

    QJsonObject job() const;
    // Loads the keys it knows; the others keep their values.
    void setJob(const QJsonObject &job);

    // Checks the strategy knobs (the engine's rules); marks and returns the
    // first problem, empty if none.
    QString validate();
    bool markField(const QString &field, const QString &message);
    void clearMarks();
    // The input of a job key; "strategy_options.KNOB" is the current strategy's.
    QWidget *field(const QString &key) const;

Q_SIGNALS:
    void changed();

private:
    // A strategy knob and the input the editor built for it from the schema.
    struct KnobField {
        const protocol::Knob *knob;
        QWidget *input;
    };

    static QWidget *knobField(const QList<KnobField> &fields, const QString &name);
    QWidget *buildDataGroup();
    QWidget *buildStrategyGroup();
    QWidget *buildBudgetGroup();
    QWidget *buildCheckpointGroup();
    QWidget *buildKnobPage(const protocol::StrategyInfo &strategy);
    QString currentStrategy() const;
    QJsonObject strategyOptions() const;
    void setStrategyOptions(const QJsonObject &options);
    void watch(QWidget *w);

    QComboBox *m_dataset, *m_partition, *m_model, *m_strategy, *m_testSet;
    QLineEdit *m_dataDir, *m_workerDirs, *m_classNames, *m_lrSchedule, *m_checkpointDir, *m_resumeFrom;
    QDoubleSpinBox *m_alpha, *m_lr, *m_seconds, *m_epochs, *m_target, *m_evalInterval;
    QSpinBox *m_batch, *m_maxRounds, *m_seed, *m_evalSamples, *m_checkpointKeep;
    QDoubleSpinBox *m_checkpointInterval;
    QStackedWidget *m_knobs;
    QHash<QString, QWidget *> m_fields;  // job key -> input, but for the knobs
    QHash<QString, QList<KnobField>> m_knobFields;  // strategy -> its knobs' inputs
};

} // namespace dlion::ui
