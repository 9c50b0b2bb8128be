#pragma once

#include <QHash>
#include <QJsonObject>
#include <QWidget>

class QCheckBox;
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
    QWidget *field(const QString &key) const { return m_fields.value(key); }

Q_SIGNALS:
    void changed();

private:
    QWidget *buildDataGroup();
    QWidget *buildStrategyGroup();
    QWidget *buildBudgetGroup();
    QWidget *buildCheckpointGroup();
    QJsonObject strategyOptions() const;
    void setStrategyOptions(const QJsonObject &options);
    void watch(QWidget *w);

    QComboBox *m_dataset, *m_partition, *m_model, *m_strategy, *m_hopTopology, *m_testSet;
    QLineEdit *m_dataDir, *m_workerDirs, *m_classNames, *m_checkpointDir, *m_resumeFrom;
    QDoubleSpinBox *m_alpha, *m_lr, *m_seconds, *m_epochs, *m_target, *m_evalInterval;
    QSpinBox *m_batch, *m_maxRounds, *m_seed, *m_evalSamples, *m_checkpointKeep;
    QDoubleSpinBox *m_checkpointInterval;
    QStackedWidget *m_knobs;
    QCheckBox *m_wdb, *m_prioritized, *m_dkt, *m_hopSkip;
    QSpinBox *m_dktPeriod, *m_dlionStaleness, *m_akoPartitions, *m_hopBackup, *m_hopStaleness;
    QDoubleSpinBox *m_dktAlpha, *m_gaiaThreshold;
    QHash<QString, QWidget *> m_fields;  // job key -> input
};

} // namespace dlion::ui
