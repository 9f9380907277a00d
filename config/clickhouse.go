package config

// ClickHouse configures the ClickHouse sink. Nil when the file has no
// clickhouse section.
type ClickHouse struct {
	Addr []string `yaml:"addr"`
}

func (ch *ClickHouse) defaults(c *Config) {}

func (ch *ClickHouse) validate(c *Config, p *Problems) {}
