package erasure

import "fmt"

func (c *rsCodec) Update(shards, newData [][]byte) error {
	if err := c.enc.Update(shards, newData); err != nil {
		return fmt.Errorf("erasure: reed-solomon %d+%d update: %w", c.k, c.r, err)
	}
	return nil
}
