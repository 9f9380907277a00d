package config

// Kafka configures the Kafka runtime (`cdcjoin run`). Owned by the runtime;
// only validated when a command needs Kafka (see ValidateKafka).
type Kafka struct {
	Brokers []string `yaml:"brokers"`
}

func (k *Kafka) defaults(c *Config) {}

func (k *Kafka) validate(c *Config, p *Problems) {}
