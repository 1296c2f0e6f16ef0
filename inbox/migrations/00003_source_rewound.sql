-- +goose Up
-- A source that Release or AcceptGap rewound keeps the position it had, marked rewound: it reads
-- again from its start, but what that position still owed is not forgotten. A file source still
-- reads to its end the file the position named (a rotated file it had not finished), and a stream
-- source keeps the position as the floor of its retention-gap check. The next position a source
-- stores clears the mark.
ALTER TABLE inbox_sources ADD COLUMN rewound INTEGER NOT NULL DEFAULT 0 CHECK (rewound IN (0, 1));

-- +goose Down
-- Before this version a rewound source had no position at all (NULL): the one it was rewound from
-- is given up, as that release would have done at the rewind.
UPDATE inbox_sources SET position = NULL WHERE rewound = 1;
ALTER TABLE inbox_sources DROP COLUMN rewound;
